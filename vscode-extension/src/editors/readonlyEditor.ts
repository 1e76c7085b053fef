/**
 * One read-only custom editor per file type: the shell is shared (page, loading, errors,
 * reload when the file changes, opening sources), each kind supplies how to load its file and
 * any messages of its own.
 */
import * as path from 'path';
import * as vscode from 'vscode';
import { openSource } from '../sourceFiles';
import type { HostMessage, WebviewMessage } from '../webview/messages';
import { onMessage, post, setUpWebview } from '../webview/panel';

/** What a loaded file leaves for later messages (a parsed model): kept per editor, dropped with it. */
export interface Loaded<S> {
    message: HostMessage;
    state?: S;
}

export interface EditorKind<S = unknown> {
    viewType: string;
    script: string;   // dist/ui/<script>.js
    describe: string; // "cProfile profile", for the loading line
    load(uri: vscode.Uri, signal: AbortSignal): Promise<Loaded<S>>;
    /** Messages beyond the shared ones; `postBack` answers into the same webview. */
    handle?(m: WebviewMessage, uri: vscode.Uri, state: S | undefined, postBack: (m: HostMessage) => void): Promise<void> | void;
    /** The editor became the active one (line profiles turn their decorations to this file). */
    activated?(uri: vscode.Uri, state: S | undefined): void;
}

export class ReadonlyEditor<S> implements vscode.CustomReadonlyEditorProvider {
    constructor(private readonly extensionUri: vscode.Uri, private readonly kind: EditorKind<S>) {}

    static register<S>(context: vscode.ExtensionContext, kind: EditorKind<S>): void {
        context.subscriptions.push(vscode.window.registerCustomEditorProvider(kind.viewType, new ReadonlyEditor(context.extensionUri, kind), {
            webviewOptions: { retainContextWhenHidden: true },
            supportsMultipleEditorsPerDocument: true,
        }));
    }

    openCustomDocument(uri: vscode.Uri): vscode.CustomDocument {
        return { uri, dispose: () => undefined };
    }

    resolveCustomEditor(document: vscode.CustomDocument, panel: vscode.WebviewPanel): void {
        const uri = document.uri;
        const webview = panel.webview;
        setUpWebview(webview, this.extensionUri, this.kind.script, path.basename(uri.fsPath));
        let abort = new AbortController();
        let state: S | undefined;
        const start = () => this.kind.load(uri, abort.signal).then((loaded): HostMessage => {
            state = loaded.state;
            return loaded.message;
        }, (e: Error): HostMessage => ({
            type: 'error', title: `${path.basename(uri.fsPath)} could not be opened`, message: String(e?.message ?? e), detail: e?.stack, actions: ['retry'],
        }));
        let loaded = start();
        let ready = false;
        const show = async () => {
            void post(webview, await loaded);
        };
        const reload = () => {
            abort.abort();
            abort = new AbortController();
            loaded = start();
            if (ready) {
                void post(webview, { type: 'loading', what: `Reading ${path.basename(uri.fsPath)} again…` });
                void show();
            }
        };
        const disposables: vscode.Disposable[] = [
            onMessage(webview, async (m) => {
                switch (m.type) {
                    case 'ready':
                        ready = true;
                        void post(webview, { type: 'loading', what: `Reading ${this.kind.describe}…` });
                        await show();
                        return;
                    case 'openSource':
                        await openSource(m.file, m.line, uri);
                        return;
                    case 'action':
                        if (m.action === 'retry') {
                            reload();
                        } else if (m.action === 'reopenAsText') {
                            await vscode.commands.executeCommand('vscode.openWith', uri, 'default');
                        } else if (m.action === 'openSettings') {
                            await vscode.commands.executeCommand('workbench.action.openSettings', 'tensorDap.pythonPath');
                        }
                        return;
                    default:
                        await loaded;
                        await this.kind.handle?.(m, uri, state, (answer) => void post(webview, answer));
                }
            }),
            watchFile(uri, reload),
            panel.onDidChangeViewState((e) => {
                if (e.webviewPanel.active) {
                    void loaded.then(() => this.kind.activated?.(uri, state));
                }
            }),
        ];
        if (panel.active) {
            void loaded.then(() => this.kind.activated?.(uri, state));
        }
        panel.onDidDispose(() => {
            abort.abort();
            state = undefined;
            disposables.forEach((d) => d.dispose());
        });
    }
}

/** Calls `changed` (debounced) when the file is rewritten, e.g. by a new profiling run. */
function watchFile(uri: vscode.Uri, changed: () => void): vscode.Disposable {
    if (uri.scheme !== 'file') {
        return { dispose: () => undefined };
    }
    const watcher = vscode.workspace.createFileSystemWatcher(
        new vscode.RelativePattern(vscode.Uri.file(path.dirname(uri.fsPath)), path.basename(uri.fsPath)), true, false, true);
    let timer: NodeJS.Timeout | undefined;
    const sub = watcher.onDidChange(() => {
        clearTimeout(timer);
        timer = setTimeout(changed, 500);
    });
    return { dispose: () => { clearTimeout(timer); sub.dispose(); watcher.dispose(); } };
}
