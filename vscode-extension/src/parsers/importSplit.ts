/**
 * The time a .prof spent importing, as `python -m tensor_dap.profiling.import_json` prints it
 * (schema version 1, documented in tensor_dap/profiling/import_json.py), laid over the profile's
 * functions: tensor_dap computes the estimate in one place, the page only shows it.
 */
import { FileFormatError } from './errors';
import type { PstatsModel } from './pstats';

/** The program's time without imports, by function id of the profile (-1: left out, it is import). */
export interface ImportSplit {
    importing: number;   // seconds spent importing
    profiled: number;    // seconds profiled
    own: number[];
    cumulative: number[];
}

interface ImportJson {
    format: string;
    version: number;
    importing: number;
    profiled: number;
    functions: [string, number, string, number, number][];
}

export function importSplit(model: PstatsModel, json: unknown): ImportSplit {
    const m = json as ImportJson;
    if (!m || m.format !== 'tensor_dap.profiling.import_json' || !Array.isArray(m.functions)) {
        throw new FileFormatError('the Python import estimate returned something else');
    }
    if (m.version !== 1) {
        throw new FileFormatError(`the Python import estimate wrote schema version ${String(m.version)}; this extension reads version 1`);
    }
    const ids = new Map<string, number>();
    model.functions.forEach((f) => ids.set(key(f.file, f.line, f.name), f.id));
    const n = model.functions.length;
    const split: ImportSplit = {
        importing: finite(m.importing), profiled: finite(m.profiled),
        own: new Array<number>(n).fill(-1), cumulative: new Array<number>(n).fill(-1),
    };
    for (const row of m.functions) {
        const id = Array.isArray(row) ? ids.get(key(row[0], row[1], row[2])) : undefined;
        if (id !== undefined) {
            split.own[id] = finite(row[3]);
            split.cumulative[id] = finite(row[4]);
        }
    }
    return split;
}

function key(file: unknown, line: unknown, name: unknown): string {
    return `${String(file)}\u0000${String(line)}\u0000${String(name)}`;
}

function finite(v: unknown): number {
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
        throw new FileFormatError(`the Python import estimate holds a time that is not a finite number of seconds: ${String(v).slice(0, 40)}`);
    }
    return v;
}
