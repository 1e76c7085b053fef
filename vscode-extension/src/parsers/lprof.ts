/**
 * line_profiler files (`.lprof`, a pickled `LineStats`) into the model
 * `python -m tensor_dap.profiling.export` prints (schema version 1), read natively with the
 * data-only pickle reader.
 */
import { FileFormatError } from './errors';
import { PyDict, PyList, PyValue } from './marshal';
import { loadPickle, PickleValue, PyObject } from './pickle';

/** [line number, hits, seconds] */
export type LineRow = [number, number, number];

export interface LprofFunction {
    file: string;
    line: number;
    name: string;
    total: number;
    lines: LineRow[];
}

export interface LprofModel {
    format: 'tensor_dap.profiling.export';
    version: 1;
    kind: 'line_profiler';
    unit: number;
    functions: LprofFunction[];
}

/** Where line_profiler has kept its LineStats class over its versions. */
const LINESTATS = new Set([
    'line_profiler.line_profiler.LineStats',
    'line_profiler.LineStats',
    'line_profiler._line_profiler.LineStats',
]);

export function parseLprof(data: Uint8Array): LprofModel {
    if (data.length === 0) {
        throw new FileFormatError('the file is empty');
    }
    if (data[0] !== 0x80 && data[0] !== 0x28 && data[0] !== 0x63) {
        throw new FileFormatError('not a line_profiler file (it is not a pickle)');
    }
    const root = loadPickle(data, LINESTATS);
    if (!(root instanceof PyObject) || !LINESTATS.has(root.cls)) {
        throw new FileFormatError('not a line_profiler file (the pickle holds no LineStats)');
    }
    let state = root.state;
    if (Array.isArray(state) && state.length === 2 && state[0] instanceof PyDict) {
        state = state[0];  // (dict, slots) form
    }
    if (!(state instanceof PyDict)) {
        throw new FileFormatError('not a line_profiler file (LineStats without timings)');
    }
    const timings = field(state, 'timings');
    const unit = field(state, 'unit');
    if (!(timings instanceof PyDict) || typeof unit !== 'number' || !Number.isFinite(unit)) {
        throw new FileFormatError('not a line_profiler file (LineStats without timings and unit)');
    }
    const functions = timings.keys.map((key, k): LprofFunction => {
        const rows = timings.values[k];
        if (!Array.isArray(key) || key.length !== 3 || !(rows instanceof PyList)) {
            throw new FileFormatError('a timings entry is not (file, line, name) -> [lines]');
        }
        const name = String(key[2]);
        const lines = rows.items.map((r): LineRow => {
            if (!Array.isArray(r) || r.length !== 3) {
                throw new FileFormatError(`a line of ${name} is not (line, hits, time)`);
            }
            return [int(r[0]), int(r[1]), num(r[2]) * unit];
        }).sort((a, b) => a[0] - b[0]);
        return { file: String(key[0]), line: int(key[1]), name, total: lines.reduce((s, r) => s + r[2], 0), lines };
    });
    functions.sort((a, b) => (a.file < b.file ? -1 : a.file > b.file ? 1 : a.line - b.line || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)));
    return { format: 'tensor_dap.profiling.export', version: 1, kind: 'line_profiler', unit, functions };
}

function field(d: PyDict, name: string): PickleValue | undefined {
    return d.get(name);
}

function int(v: PyValue): number {
    if (typeof v === 'number' && Number.isInteger(v)) {
        return v;
    }
    if (typeof v === 'bigint') {
        return Number(v);
    }
    throw new FileFormatError('expected an integer in the line timings');
}

function num(v: PyValue): number {
    if (typeof v === 'number' && Number.isFinite(v)) {
        return v;
    }
    if (typeof v === 'bigint') {
        return Number(v);
    }
    throw new FileFormatError('expected a finite number in the line timings');
}

/** Accepts the JSON `python -m tensor_dap.profiling.export` prints for a .lprof (the fallback path). */
export function lprofFromExport(json: unknown): LprofModel {
    const m = json as LprofModel;
    if (!m || m.format !== 'tensor_dap.profiling.export' || m.kind !== 'line_profiler' || !Array.isArray(m.functions)) {
        throw new FileFormatError('the Python exporter returned something that is not a line_profiler model');
    }
    if (m.version !== 1) {
        throw new FileFormatError(`the Python exporter wrote schema version ${String(m.version)}; this extension reads version 1`);
    }
    return m;
}
