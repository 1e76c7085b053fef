/**
 * cProfile / pstats files (`.prof`) into the model `python -m tensor_dap.profiling.export` prints
 * (schema version 1, documented in tensor_dap/profiling/export.py), read natively from the
 * marshal bytes so that opening a profile needs no Python.
 */
import { FileFormatError } from './errors';
import { loadMarshal, PyDict, PyValue } from './marshal';

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
    format: 'tensor_dap.profiling.export';
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
    const n = table.keys.length;
    const ids = new FunctionIds();
    const keys: [string, number, string][] = new Array(n);
    for (let i = 0; i < n; i++) {
        keys[i] = funcKey(table.keys[i]);
        ids.set(keys[i], i);
    }
    let total = 0;
    const functions: ProfFunction[] = new Array(n);
    for (let i = 0; i < n; i++) {
        const [file, line, name] = keys[i];
        const value = table.values[i];
        if (!Array.isArray(value) || value.length !== 5) {
            throw new FileFormatError(`the entry for ${name} is not (cc, nc, tt, ct, callers)`);
        }
        const callers = value[4];
        if (!(callers instanceof PyDict)) {
            throw new FileFormatError(`the callers of ${name} are not a dict`);
        }
        const edges: CallEdge[] = [];
        for (let k = 0; k < callers.keys.length; k++) {
            const ck = callers.keys[k];
            const callerId = Array.isArray(ck) && ck.length === 3 && typeof ck[0] === 'string' && typeof ck[1] === 'number' && typeof ck[2] === 'string'
                ? ids.lookup(ck[0], ck[1], ck[2])
                : ids.get(funcKey(ck));
            if (callerId === undefined) {
                continue;  // merged pstats files can name callers that have no entry of their own
            }
            const edge = callers.values[k];
            if (Array.isArray(edge) && edge.length === 4) {
                edges.push([callerId, int(edge[0]), int(edge[1]), num(edge[2]), num(edge[3])]);
            } else {  // profile.Profile (pure Python) records a bare call count
                edges.push([callerId, int(edge), int(edge), 0, 0]);
            }
        }
        const own = num(value[2]);
        total += own;
        functions[i] = { id: i, file, line, name, calls: int(value[1]), primitive_calls: int(value[0]), own, cumulative: num(value[3]), callers: edges };
    }
    return { format: 'tensor_dap.profiling.export', version: 1, kind: 'pstats', total_time: total, functions };
}

function funcKey(key: PyValue): [string, number, string] {
    if (!Array.isArray(key) || key.length !== 3) {
        throw new FileFormatError('a function key is not (file, line, name)');
    }
    return [String(key[0]), int(key[1]), String(key[2])];
}

/**
 * Function ids by (file, line, name), in nested maps: the file and name strings are shared
 * by the marshal back-references, so their hashes are computed once, where a joined key string
 * would be built and hashed anew for each of the ~100k lookups.
 */
class FunctionIds {
    private readonly byFile = new Map<string, Map<string, Map<number, number>>>();

    set([file, line, name]: [string, number, string], id: number): void {
        let byName = this.byFile.get(file);
        if (!byName) {
            byName = new Map();
            this.byFile.set(file, byName);
        }
        let byLine = byName.get(name);
        if (!byLine) {
            byLine = new Map();
            byName.set(name, byLine);
        }
        byLine.set(line, id);
    }

    get([file, line, name]: [string, number, string]): number | undefined {
        return this.lookup(file, line, name);
    }

    lookup(file: string, line: number, name: string): number | undefined {
        return this.byFile.get(file)?.get(name)?.get(line);
    }
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

/** Accepts the JSON `python -m tensor_dap.profiling.export` prints for a .prof (the fallback path). */
export function pstatsFromExport(json: unknown): PstatsModel {
    const m = json as PstatsModel;
    if (!m || m.format !== 'tensor_dap.profiling.export' || m.kind !== 'pstats' || !Array.isArray(m.functions)) {
        throw new FileFormatError('the Python exporter returned something that is not a pstats model');
    }
    if (m.version !== 1) {
        throw new FileFormatError(`the Python exporter wrote schema version ${String(m.version)}; this extension reads version 1`);
    }
    return m;
}
