/**
 * The user's Python: the `tensorDap.pythonPath` setting, else the interpreter selected in the
 * Python extension (when it is installed), else `python3`; and running tensor_dap modules with
 * it, with errors that say what to install where.
 */
import { execFile } from 'child_process';
import * as vscode from 'vscode';
import { explain } from './pythonErrors';

export { PythonError, TensorDapError } from './pythonErrors';

interface PythonExtensionApi {
    environments?: { getActiveEnvironmentPath(resource?: vscode.Uri): { path: string } };
    settings?: { getExecutionDetails(resource?: vscode.Uri): { execCommand: string[] | undefined } };
}

export async function resolvePython(resource?: vscode.Uri): Promise<string> {
    const folder = resource ? vscode.workspace.getWorkspaceFolder(resource) : vscode.workspace.workspaceFolders?.[0];
    const configured = vscode.workspace.getConfiguration('tensorDap', resource).get<string>('pythonPath')?.trim();
    if (configured) {
        return configured.replace(/\$\{workspaceFolder\}/g, folder?.uri.fsPath ?? '');
    }
    const ext = vscode.extensions.getExtension<PythonExtensionApi>('ms-python.python');
    if (ext) {
        try {
            const api = ext.isActive ? ext.exports : await ext.activate();
            const path = api?.environments?.getActiveEnvironmentPath(resource)?.path
                ?? api?.settings?.getExecutionDetails(resource)?.execCommand?.[0];
            if (path) {
                return path;
            }
        } catch {
            // An old or broken Python extension: fall back to python3.
        }
    }
    return 'python3';
}

/** Runs `python -m MODULE ARGS` and returns stdout; errors become PythonError/TensorDapError. */
export function runModule(python: string, module: string, args: string[], opts: { timeoutMs?: number; cwd?: string } = {}): Promise<string> {
    return new Promise((resolve, reject) => {
        execFile(python, ['-m', module, ...args], { timeout: opts.timeoutMs ?? 120_000, maxBuffer: 1 << 30, cwd: opts.cwd, encoding: 'utf8' },
            (error, stdout, stderr) => {
                if (!error) {
                    resolve(stdout);
                    return;
                }
                reject(explain(python, module, error as NodeJS.ErrnoException & { code?: string | number; killed?: boolean }, stderr));
            });
    });
}
