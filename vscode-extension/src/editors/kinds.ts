/** The five read-only editors: which file, which page script, how to load, what else they answer. */
import * as vscode from 'vscode';
import type { LineDecorations } from '../lineDecorations';
import type { LprofModel } from '../parsers/lprof';
import { resolvePython, runModule } from '../python';
import { openSource, readSourceLines } from '../sourceFiles';
import type { PstatsModel } from '../parsers/pstats';
import { CallGraph } from '../views/profView';
import { EditorKind } from './readonlyEditor';
import { loadIncident, LoaderDeps, loadLprof, loadMemory, loadProf, loadTrace } from './loaders';

function deps(uri: vscode.Uri): LoaderDeps {
    return {
        exportWithPython: async (path) => JSON.parse(await runModule(await resolvePython(uri), 'tensor_dap.profile.export', [path])),
        readSource: (file, first, last) => readSourceLines(file, first, last, uri),
    };
}

export function profKind(): EditorKind {
    const models = new Map<string, PstatsModel>();
    const graphs = new Map<string, CallGraph>();
    const graphOf = (uri: vscode.Uri) => {
        const key = uri.toString();
        const model = models.get(key);
        if (model && !graphs.has(key)) {
            graphs.set(key, new CallGraph(model));
        }
        return graphs.get(key);
    };
    return {
        viewType: 'tensorDap.prof',
        script: 'prof',
        describe: 'the cProfile profile',
        async load(uri) {
            const { message, model } = await loadProf(uri.fsPath, deps(uri));
            graphs.delete(uri.toString());
            if (model) {
                models.set(uri.toString(), model);
            }
            return message;
        },
        handle(m, uri, postBack) {
            const graph = graphOf(uri);
            if (m.type === 'relatives' && graph) {
                postBack({ type: 'relatives', id: m.id, callers: graph.callersOf(m.id), callees: graph.calleesOf(m.id) });
            } else if (m.type === 'icicle' && graph) {
                postBack({ type: 'icicle', nodes: graph.icicle() });
            }
        },
    };
}

export function lprofKind(decorations: LineDecorations): EditorKind {
    const models = new Map<string, LprofModel>();
    const autoShow = () => vscode.workspace.getConfiguration('tensorDap').get<boolean>('lineProfile.showOnOpen', true);
    return {
        viewType: 'tensorDap.lprof',
        script: 'lprof',
        describe: 'the line profile',
        async load(uri) {
            const { message, model } = await loadLprof(uri.fsPath, deps(uri), autoShow());
            if (model) {
                models.set(uri.toString(), model);
                if (autoShow()) {
                    decorations.show(model, uri);
                }
            }
            return message;
        },
        activated(uri) {
            const model = models.get(uri.toString());
            if (model && autoShow() && decorations.current?.toString() !== uri.toString()) {
                decorations.show(model, uri);
            }
        },
        async handle(m, uri) {
            const model = models.get(uri.toString());
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
        load: (uri, signal) => loadTrace(uri.fsPath, signal),
    };
}

export function memoryKind(): EditorKind {
    return {
        viewType: 'tensorDap.memory',
        script: 'memory',
        describe: 'the memory report',
        load: (uri) => loadMemory(uri.fsPath),
    };
}

export function incidentKind(replay: (bundle: vscode.Uri) => Promise<void>): EditorKind {
    return {
        viewType: 'tensorDap.incident',
        script: 'incident',
        describe: 'the incident report',
        load: (uri) => loadIncident(uri.fsPath),
        async handle(m, uri) {
            if (m.type === 'replay') {
                await replay(vscode.Uri.joinPath(uri, '..'));
            }
        },
    };
}
