/**
 * "tensor_dap: Profile Current File": runs `tensor-dap profile --mode MODE FILE` as a task in a
 * terminal, then opens the profile it wrote: the first file the run's manifest
 * (`.tensor_dap/profiles/<run>/profile.json`, `files`) lists that the extension shows, else the
 * newest profiler file created while it ran.
 */
import * as path from 'path';
import * as vscode from 'vscode';
import { resolvePython } from '../python';

const MODES = [
    { label: 'cpu', description: 'cProfile: every function, its callers and callees (.prof)' },
    { label: 'line', description: 'line_profiler: time per line of the functions you mark (.lprof)' },
    { label: 'torch', description: 'torch.profiler: operators, kernels, input shapes (.pt.trace.json)' },
    { label: 'memory', description: 'allocation sites and peak memory (memory.json)' },
];

export const OUTPUT_GLOB = '**/{*.prof,*.lprof,*.trace.json,*.trace.json.gz,memory.json,profile.json}';
const VIEWABLE = /(\.prof|\.lprof|\.trace\.json(\.gz)?|(^|\/)memory\.json)$/;

export async function profileCurrentFile(): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    if (!editor || editor.document.uri.scheme !== 'file') {
        void vscode.window.showErrorMessage('tensor_dap: open the Python file to profile first.');
        return;
    }
    await editor.document.save();
    const mode = await vscode.window.showQuickPick(MODES, { title: `Profile ${path.basename(editor.document.fileName)}` });
    if (!mode) {
        return;
    }
    const file = editor.document.uri;
    const folder = vscode.workspace.getWorkspaceFolder(file);
    const python = await resolvePython(file);
    const created: vscode.Uri[] = [];
    const watcher = vscode.workspace.createFileSystemWatcher(new vscode.RelativePattern(folder ?? vscode.Uri.file(path.dirname(file.fsPath)), OUTPUT_GLOB));
    watcher.onDidCreate((u) => created.push(u));
    watcher.onDidChange((u) => created.push(u));
    const task = new vscode.Task(
        { type: 'tensorDap', mode: mode.label, file: file.fsPath }, folder ?? vscode.TaskScope.Workspace,
        `profile ${path.basename(file.fsPath)} (${mode.label})`, 'tensor_dap',
        new vscode.ProcessExecution(python, ['-m', 'tensor_dap', 'profile', '--mode', mode.label, file.fsPath],
            { cwd: folder?.uri.fsPath ?? path.dirname(file.fsPath) }));
    task.presentationOptions = { reveal: vscode.TaskRevealKind.Always, panel: vscode.TaskPanelKind.Dedicated, clear: true };
    const execution = await vscode.tasks.executeTask(task);
    const done = vscode.tasks.onDidEndTaskProcess(async (e) => {
        if (e.execution !== execution) {
            return;
        }
        done.dispose();
        setTimeout(() => watcher.dispose(), 1000);
        if (e.exitCode !== 0) {
            void vscode.window.showErrorMessage(`tensor_dap: profiling exited with code ${e.exitCode}; see the terminal. (Is tensor_dap installed for ${python}?)`);
            return;
        }
        await new Promise((r) => setTimeout(r, 300));  // let the last file events arrive
        const output = await outputOf(created);
        if (output) {
            await vscode.commands.executeCommand('vscode.open', output);
        } else {
            void vscode.window.showInformationMessage('tensor_dap: profiling finished; the terminal says where it wrote its output.');
        }
    });
}

async function outputOf(created: vscode.Uri[]): Promise<vscode.Uri | undefined> {
    const manifest = [...created].reverse().find((u) => path.basename(u.fsPath) === 'profile.json');
    if (manifest) {
        try {
            const files = (JSON.parse(new TextDecoder().decode(await vscode.workspace.fs.readFile(manifest))) as { files?: unknown }).files;
            const first = Array.isArray(files) ? files.find((f): f is string => typeof f === 'string' && VIEWABLE.test(f)) : undefined;
            if (first) {
                return vscode.Uri.joinPath(manifest, '..', first);
            }
        } catch {
            // an unreadable manifest: fall back to the files seen
        }
    }
    return [...created].reverse().find((u) => VIEWABLE.test(u.fsPath));
}
