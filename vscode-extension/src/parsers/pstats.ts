/**
 * cProfile / pstats files (`.prof`) into the model `python -m tensor_dap.profile.export` prints
 * (schema version 1, documented in tensor_dap/profile/export.py), read natively from the
 * marshal bytes so that opening a profile needs no Python.
 */
import { FileFormatError } from './errors';
import { loadMarshal, PyDict, PyTuple, PyValue } from './marshal';

/** [caller id, calls, primitive calls, own seconds, cumulative seconds] */
export type CallEdge = [number, number, number, number, number];

export interface ProfFunction {
    id: number;
    file: string;
    line: number;
    name: string;
    calls: number;
    primitive_calls: number;
    own: number;
    cumulative: number;
    callers: CallEdge[];
}

export interface PstatsModel {
    format: 'tensor_dap.profile.export';
    version: 1;
    kind: 'pstats';
    total_time: number;
    functions: ProfFunction[];
}

export function parsePstats(data: Uint8Array): PstatsModel {
    if (data.length === 0) {
        throw new FileFormatError('the file is empty');
    }
    const first = data[0] & 0x7f;
    if (first !== 0x7b /* '{' */) {
        throw new FileFormatError('not a cProfile/pstats file (it does not start with a marshalled dict)');
    }
    const table = loadMarshal(data);
    if (!(table instanceof PyDict)) {
        throw new FileFormatError('not a cProfile/pstats file');
    }
    return fromTable(table);
}

function fromTable(table: PyDict): PstatsModel {
    const ids = new Map<string, number>();
    const keys = table.entries.map(([key], i) => {
        const k = funcKey(key);
        ids.set(keyString(k), i);
        return k;
    });
    let total = 0;
    const functions = table.entries.map(([, value], i): ProfFunction => {
        const [file, line, name] = keys[i];
        if (!(value instanceof PyTuple) || value.length !== 5) {
            throw new FileFormatError(`the entry for ${name} is not (cc, nc, tt, ct, callers)`);
        }
        const [cc, nc, tt, ct, callers] = value;
        if (!(callers instanceof PyDict)) {
            throw new FileFormatError(`the callers of ${name} are not a dict`);
        }
        const edges: CallEdge[] = [];
        for (const [caller, edge] of callers.entries) {
            const callerId = ids.get(keyString(funcKey(caller)));
            if (callerId === undefined) {
                continue;  // merged pstats files can name callers that have no entry of their own
            }
            if (edge instanceof PyTuple && edge.length === 4) {
                edges.push([callerId, int(edge[0]), int(edge[1]), num(edge[2]), num(edge[3])]);
            } else {  // profile.Profile (pure Python) records a bare call count
                edges.push([callerId, int(edge), int(edge), 0, 0]);
            }
        }
        total += num(tt);
        return { id: i, file, line, name, calls: int(nc), primitive_calls: int(cc), own: num(tt), cumulative: num(ct), callers: edges };
    });
    return { format: 'tensor_dap.profile.export', version: 1, kind: 'pstats', total_time: total, functions };
}

function funcKey(key: PyValue): [string, number, string] {
    if (!(key instanceof PyTuple) || key.length !== 3) {
        throw new FileFormatError('a function key is not (file, line, name)');
    }
    return [String(key[0]), int(key[1]), String(key[2])];
}

function keyString(k: [string, number, string]): string {
    return `${k[0]}\0${k[1]}\0${k[2]}`;
}

function int(v: PyValue): number {
    if (typeof v === 'number' && Number.isInteger(v)) {
        return v;
    }
    if (typeof v === 'bigint') {
        return Number(v);
    }
    throw new FileFormatError(`expected an integer in the pstats table, found ${describe(v)}`);
}

function num(v: PyValue): number {
    if (typeof v === 'number' && Number.isFinite(v)) {
        return v;
    }
    if (typeof v === 'bigint') {
        return Number(v);
    }
    throw new FileFormatError(`expected a finite number in the pstats table, found ${describe(v)}`);
}

function describe(v: PyValue): string {
    return v === null ? 'None' : typeof v === 'object' ? v.constructor.name : String(v).slice(0, 40);
}

/** Accepts the JSON `python -m tensor_dap.profile.export` prints for a .prof (the fallback path). */
export function pstatsFromExport(json: unknown): PstatsModel {
    const m = json as PstatsModel;
    if (!m || m.format !== 'tensor_dap.profile.export' || m.kind !== 'pstats' || !Array.isArray(m.functions)) {
        throw new FileFormatError('the Python exporter returned something that is not a pstats model');
    }
    if (m.version !== 1) {
        throw new FileFormatError(`the Python exporter wrote schema version ${String(m.version)}; this extension reads version 1`);
    }
    return m;
}
