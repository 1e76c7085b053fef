/** Sets up a webview with the page template, its script and a typed post. */
import * as vscode from 'vscode';
import { pageHtml } from './html';
import type { HostMessage, WebviewMessage } from './messages';

export function setUpWebview(webview: vscode.Webview, extensionUri: vscode.Uri, script: string, title: string): void {
    const ui = vscode.Uri.joinPath(extensionUri, 'dist', 'ui');
    webview.options = { enableScripts: true, localResourceRoots: [ui] };
    webview.html = pageHtml({
        title,
        cspSource: webview.cspSource,
        scriptUri: webview.asWebviewUri(vscode.Uri.joinPath(ui, `${script}.js`)).toString(),
        styleUri: webview.asWebviewUri(vscode.Uri.joinPath(ui, 'style.css')).toString(),
    });
}

export function post(webview: vscode.Webview, message: HostMessage): Thenable<boolean> {
    return webview.postMessage(message);
}

/** Runs a handler for each message, reporting any failure instead of letting it escape. */
export function onMessage(webview: vscode.Webview, handler: (m: WebviewMessage) => Promise<void> | void): vscode.Disposable {
    return webview.onDidReceiveMessage(async (m: WebviewMessage) => {
        try {
            await handler(m);
        } catch (e) {
            void vscode.window.showErrorMessage(`tensor_dap: ${(e as Error).message ?? String(e)}`);
        }
    });
}
