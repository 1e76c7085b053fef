/** The five read-only editors: which file, which page script, how to load, what else they answer. */
import * as vscode from 'vscode';
import type { LineDecorations } from '../lineDecorations';
import type { LprofModel } from '../parsers/lprof';
import { resolvePython, runModule } from '../python';
import { openSource, readSourceLines } from '../sourceFiles';
import type { ImportSplit } from '../parsers/importSplit';
import type { PstatsModel } from '../parsers/pstats';
import { CallGraph } from '../views/profView';
import { EditorKind } from './readonlyEditor';
import { loadImports, loadIncident, LoaderDeps, loadLprof, loadMemory, loadProf, loadTrace } from './loaders';

function deps(uri: vscode.Uri): LoaderDeps {
    return {
        exportWithPython: async (path) => JSON.parse(await runModule(await resolvePython(uri), 'tensor_dap.profiling.export', [path])),
        importsWithPython: async (path) => JSON.parse(await runModule(await resolvePython(uri), 'tensor_dap.profiling.import_json', [path])),
        readSource: (file, first, last) => readSourceLines(file, first, last, uri),
    };
}

/** A parsed profile, with its call graph built on the first request for callers or the icicle. */
class ProfState {
    private graph: CallGraph | undefined;
    split: ImportSplit | null = null;  // tensor_dap's estimate of the time spent importing, once the page asked
    constructor(readonly model: PstatsModel) {}
    get calls(): CallGraph {
        return (this.graph ??= new CallGraph(this.model));
    }
}

export function profKind(): EditorKind<ProfState> {
    return {
        viewType: 'tensorDap.prof',
        script: 'prof',
        describe: 'the cProfile profile',
        async load(uri) {
            const { message, model } = await loadProf(uri.fsPath, deps(uri));
            return { message, state: model && new ProfState(model) };
        },
        async handle(m, uri, state, postBack) {
            if (m.type === 'imports' && state) {
                const answer = await loadImports(uri.fsPath, state.model, deps(uri));
                state.split = answer.type === 'imports' ? answer.split : null;
                postBack(answer);
            } else if (m.type === 'relatives' && state) {
                postBack({ type: 'relatives', id: m.id, callers: state.calls.callersOf(m.id), callees: state.calls.calleesOf(m.id) });
            } else if (m.type === 'icicle' && state) {
                postBack({ type: 'icicle', nodes: state.calls.icicle({ without: (m.withoutImports && state.split) || undefined }) });
            }
        },
    };
}

export function lprofKind(decorations: LineDecorations): EditorKind<LprofModel> {
    const autoShow = () => vscode.workspace.getConfiguration('tensorDap').get<boolean>('lineProfile.showOnOpen', true);
    return {
        viewType: 'tensorDap.lprof',
        script: 'lprof',
        describe: 'the line profile',
        async load(uri) {
            const { message, model } = await loadLprof(uri.fsPath, deps(uri), autoShow());
            if (model && autoShow()) {
                decorations.show(model, uri);
            }
            return { message, state: model };
        },
        activated(uri, model) {
            if (model && autoShow() && decorations.current?.toString() !== uri.toString()) {
                decorations.show(model, uri);
            }
        },
        async handle(m, uri, model) {
            if (m.type === 'showLineProfile' && model) {
                decorations.show(model, uri);
                await openSource(m.file, m.line, uri);
            }
        },
    };
}

export function traceKind(): EditorKind {
    return {
        viewType: 'tensorDap.trace',
        script: 'trace',
        describe: 'the trace (large traces take a few seconds)',
        load: async (uri, signal) => ({ message: await loadTrace(uri.fsPath, signal) }),
    };
}

export function memoryKind(): EditorKind {
    return {
        viewType: 'tensorDap.memory',
        script: 'memory',
        describe: 'the memory report',
        load: async (uri) => ({ message: await loadMemory(uri.fsPath) }),
    };
}

export function incidentKind(replay: (bundle: vscode.Uri) => Promise<void>): EditorKind {
    return {
        viewType: 'tensorDap.incident',
        script: 'incident',
        describe: 'the incident report',
        load: async (uri) => ({ message: await loadIncident(uri.fsPath) }),
        async handle(m, uri) {
            if (m.type === 'replay') {
                await replay(vscode.Uri.joinPath(uri, '..'));
            }
        },
    };
}
