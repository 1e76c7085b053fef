/**
 * "tensor_dap: Open TensorBoard": starts `tensor-dap tensorboard LOGDIR --port PORT` in a
 * terminal for a chosen log folder and shows it in the Simple Browser once it answers.
 */
import * as net from 'net';
import * as path from 'path';
import * as vscode from 'vscode';
import { resolvePython } from '../python';
import { tensorBoardArgs } from './commandLines';

export async function openTensorBoard(): Promise<void> {
    const folder = vscode.workspace.workspaceFolders?.[0];
    const guess = folder && (await firstExisting(folder.uri, ['runs', 'logs', 'lightning_logs', 'tb_logs']));
    const picked = await vscode.window.showOpenDialog({
        title: 'TensorBoard log folder', canSelectFiles: false, canSelectFolders: true, canSelectMany: false,
        defaultUri: guess ?? folder?.uri, openLabel: 'Open in TensorBoard',
    });
    if (!picked?.length) {
        return;
    }
    const logdir = picked[0].fsPath;
    const port = await freePort();
    const python = await resolvePython(picked[0]);
    const terminal = vscode.window.createTerminal({ name: `TensorBoard ${path.basename(logdir)}`, shellPath: python,
        shellArgs: tensorBoardArgs(logdir, port), cwd: folder?.uri.fsPath });
    terminal.show(true);
    const local = vscode.Uri.parse(`http://127.0.0.1:${port}/`);
    if (!(await waitForPort(port, 60_000))) {
        void vscode.window.showErrorMessage(`tensor_dap: TensorBoard did not start on port ${port}; see the "${terminal.name}" terminal.`);
        return;
    }
    const url = await vscode.env.asExternalUri(local);
    await vscode.commands.executeCommand('simpleBrowser.show', url.toString());
}

async function firstExisting(root: vscode.Uri, names: string[]): Promise<vscode.Uri | undefined> {
    for (const name of names) {
        const uri = vscode.Uri.joinPath(root, name);
        try {
            if ((await vscode.workspace.fs.stat(uri)).type === vscode.FileType.Directory) {
                return uri;
            }
        } catch {
            // not there
        }
    }
    return undefined;
}

function freePort(): Promise<number> {
    return new Promise((resolve, reject) => {
        const server = net.createServer();
        server.once('error', reject);
        server.listen(0, '127.0.0.1', () => {
            const port = (server.address() as net.AddressInfo).port;
            server.close(() => resolve(port));
        });
    });
}

async function waitForPort(port: number, timeoutMs: number): Promise<boolean> {
    const end = Date.now() + timeoutMs;
    while (Date.now() < end) {
        const up = await new Promise<boolean>((resolve) => {
            const socket = net.connect(port, '127.0.0.1', () => { socket.destroy(); resolve(true); });
            socket.once('error', () => resolve(false));
        });
        if (up) {
            return true;
        }
        await new Promise((r) => setTimeout(r, 500));
    }
    return false;
}
