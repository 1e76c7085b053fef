/**
 * From a file on disk to the first message its webview draws: read, parse, build the view
 * model. No VS Code API here, so the benchmark and the unit tests time and check exactly what
 * an editor does before its page can render. Failures become an `error` message, never a throw.
 */
import { promises as fs } from 'fs';
import { basename, dirname } from 'path';
import { FileFormatError } from '../parsers/errors';
import { parseIncidentReport } from '../parsers/incident';
import { lprofFromExport, LprofModel, parseLprof } from '../parsers/lprof';
import { parseMemoryReport } from '../parsers/memory';
import { importSplit } from '../parsers/importSplit';
import { parsePstats, pstatsFromExport, PstatsModel } from '../parsers/pstats';
import { summarizeTraceFile } from '../parsers/traceFile';
import { PythonError, TensorDapError } from '../pythonErrors';
import { profTable } from '../views/profView';
import type { ErrorAction, HostMessage, LprofView } from '../webview/messages';

/** What a loader may need from outside: the Python fallback, and source files. */
export interface LoaderDeps {
    /** `python -m tensor_dap.profiling.export FILE`, parsed (only when the native reader cannot). */
    exportWithPython?: (path: string) => Promise<unknown>;
    /** `python -m tensor_dap.profiling.import_json FILE`, parsed: the time a .prof spent importing. */
    importsWithPython?: (path: string) => Promise<unknown>;
    /** Lines first..last (1-based) of a profiled source file, or null when it cannot be found. */
    readSource?: (file: string, first: number, last: number) => Promise<string[] | null>;
}

/** The table only: the call graph and icicle are built when the page first asks for them. */
export async function loadProf(path: string, deps: LoaderDeps = {}): Promise<{ message: HostMessage; model?: PstatsModel }> {
    const start = performance.now();
    try {
        const data = await fs.readFile(path);
        const model = await withFallback(() => parsePstats(data), deps, path, pstatsFromExport);
        const message: HostMessage = { type: 'prof', fileName: basename(path), table: profTable(model), loadMs: 0 };
        message.loadMs = performance.now() - start;
        return { message, model };
    } catch (e) {
        return { message: errorMessage(e, path, 'cProfile') };
    }
}

/**
 * The profile's time without imports, from tensor_dap's estimate; null when there is none (the selected
 * Python has no tensor_dap, or an older one): the page is whole without it.
 */
export async function loadImports(path: string, model: PstatsModel, deps: LoaderDeps = {}): Promise<HostMessage> {
    if (!deps.importsWithPython) {
        return { type: 'imports', split: null };
    }
    try {
        return { type: 'imports', split: importSplit(model, await deps.importsWithPython(path)) };
    } catch {
        return { type: 'imports', split: null };
    }
}

export async function loadLprof(path: string, deps: LoaderDeps = {}, decorations = false): Promise<{ message: HostMessage; model?: LprofModel }> {
    try {
        const data = await fs.readFile(path);
        const model = await withFallback(() => parseLprof(data), deps, path, lprofFromExport);
        const functions: LprofView[] = await Promise.all(model.functions.map(async (f) => {
            const last = f.lines.length ? Math.max(f.line, f.lines[f.lines.length - 1][0]) : f.line;
            const source = deps.readSource ? await deps.readSource(f.file, f.line, last) : null;
            return { ...f, source, sourceFirst: f.line };
        }));
        return { message: { type: 'lprof', fileName: basename(path), unit: model.unit, functions, decorations }, model };
    } catch (e) {
        return { message: errorMessage(e, path, 'line_profiler') };
    }
}

export async function loadTrace(path: string, signal?: AbortSignal): Promise<HostMessage> {
    const start = performance.now();
    try {
        const [summary, stat] = await Promise.all([summarizeTraceFile(path, signal), fs.stat(path)]);
        return { type: 'trace', fileName: basename(path), summary, loadMs: performance.now() - start, bytes: stat.size };
    } catch (e) {
        return errorMessage(e, path, 'torch.profiler trace');
    }
}

export async function loadMemory(path: string): Promise<HostMessage> {
    try {
        return { type: 'memory', fileName: basename(path), report: parseMemoryReport(await fs.readFile(path, 'utf8')) };
    } catch (e) {
        return errorMessage(e, path, 'tensor_dap memory report');
    }
}

export async function loadIncident(path: string): Promise<HostMessage> {
    try {
        return { type: 'incident', bundle: dirname(path), report: parseIncidentReport(await fs.readFile(path, 'utf8')) };
    } catch (e) {
        return errorMessage(e, path, 'tensor_dap incident report');
    }
}

async function withFallback<T>(native: () => T, deps: LoaderDeps, path: string, fromExport: (json: unknown) => T): Promise<T> {
    try {
        return native();
    } catch (e) {
        if (!(e instanceof FileFormatError && e.fallback && deps.exportWithPython)) {
            throw e;
        }
        // A format variant the built-in reader does not know: ask tensor_dap's reader.
        return fromExport(await deps.exportWithPython(path));
    }
}

export function errorMessage(e: unknown, path: string, kind: string): HostMessage {
    const name = basename(path);
    if (e instanceof FileFormatError || e instanceof TensorDapError) {
        return { type: 'error', title: `${name} cannot be shown as a ${kind} file`, message: e.message, actions: ['reopenAsText', 'retry'] };
    }
    if (e instanceof PythonError) {
        const actions: ErrorAction[] = e.hint === 'settings' ? ['openSettings', 'retry'] : ['retry'];
        return { type: 'error', title: `${name} needs Python to be read`, message: e.message, actions };
    }
    const err = e as NodeJS.ErrnoException;
    if (err?.code === 'ENOENT' || err?.code === 'EACCES' || err?.code === 'EISDIR') {
        return { type: 'error', title: `${name} cannot be read`, message: err.message, actions: ['retry'] };
    }
    return {
        type: 'error', title: `${name} could not be opened`, message: String(err?.message ?? e),
        detail: err?.stack, actions: ['reopenAsText', 'retry'],
    };
}
