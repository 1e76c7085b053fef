/**
 * "tensor_dap: Profile Current File": runs `tensor-dap profile --mode MODE FILE` as a task in a
 * terminal (line mode without profile marks in the file: the file whole, or `--function` for the functions picked),
 * then opens the profile it wrote: the first file the run's manifest
 * (`.tensor_dap/profiles/<run>/profile.json`, `files`) lists that the extension shows, else the
 * newest profiler file created while it ran (see outputOf). A failed run shows the command's own error line.
 */
import { spawn } from 'child_process';
import { promises as fs } from 'fs';
import * as path from 'path';
import * as vscode from 'vscode';
import { resolvePython } from '../python';
import { quote } from '../pythonErrors';
import { ProfileMode, hasProfileMarks, profileArgs, profileFailure, pythonFunctions } from './commandLines';

const MODES: (vscode.QuickPickItem & { label: ProfileMode })[] = [
    { label: 'cpu', description: 'cProfile: every function, its callers and callees (.prof)' },
    { label: 'line', description: 'line_profiler: time per line of the file, or of the functions you pick or mark (.lprof)' },
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
    const name = path.basename(editor.document.fileName);
    const mode = await vscode.window.showQuickPick(MODES, { title: `Profile ${name}` });
    if (!mode) {
        return;
    }
    let functions: string[] = [];
    const source = editor.document.getText();
    if (mode.label === 'line' && !hasProfileMarks(source)) {
        const picked = await pickFunctions(name, source);
        if (!picked?.length) {
            return;
        }
        functions = picked.includes(WHOLE_FILE) ? [] : picked;  // no --function: tensor-dap profiles the file whole
    }
    const file = editor.document.uri;
    const folder = vscode.workspace.getWorkspaceFolder(file);
    const python = await resolvePython(file);
    const created: vscode.Uri[] = [];
    const watcher = vscode.workspace.createFileSystemWatcher(new vscode.RelativePattern(folder ?? vscode.Uri.file(path.dirname(file.fsPath)), OUTPUT_GLOB));
    watcher.onDidCreate((u) => created.push(u));
    watcher.onDidChange((u) => created.push(u));
    const cwd = folder?.uri.fsPath ?? path.dirname(file.fsPath);
    const started = Date.now();
    const result = await runInTask(`profile ${name} (${mode.label})`, folder, python, profileArgs(mode.label, file.fsPath, functions), cwd);
    setTimeout(() => watcher.dispose(), 1000);
    if (result.cancelled) {
        return;
    }
    if (result.code !== 0) {
        void vscode.window.showErrorMessage(profileFailure(python, result, result.stderr));
        return;
    }
    await new Promise((r) => setTimeout(r, 300));  // let the last file events arrive
    const output = await outputOf(cwd, started, created);
    if (output) {
        await vscode.commands.executeCommand('vscode.open', output);
    } else {
        void vscode.window.showInformationMessage('tensor_dap: profiling finished; the terminal says where it wrote its output.');
    }
}

const WHOLE_FILE = 'the whole file';

/** The whole file (first: a training loop at the top level is where the time is), or some of its top-level
 *  functions and methods; an unchecked pick takes the highlighted one. */
function pickFunctions(name: string, source: string): Promise<string[] | undefined> {
    const items = [
        { label: WHOLE_FILE, description: 'its top-level code, functions and methods' },
        ...pythonFunctions(source).map((f) => ({ label: f.name, description: `line ${f.line}` })),
    ];
    const pick = vscode.window.createQuickPick<vscode.QuickPickItem>();
    pick.title = `Line-profile ${name} whole, or which functions?`;
    pick.placeholder = 'check one or more (or mark them with @tensor_dap.profile)';
    pick.canSelectMany = true;
    pick.items = items;
    return new Promise((resolve) => {
        let chosen: string[] | undefined;
        pick.onDidAccept(() => {
            const selected = pick.selectedItems.length ? pick.selectedItems : pick.activeItems;
            chosen = selected.map((i) => i.label);
            pick.hide();
        });
        pick.onDidHide(() => {
            pick.dispose();
            resolve(chosen);
        });
        pick.show();
    });
}

interface RunResult {
    code?: number;
    spawnError?: string;
    cancelled: boolean;
    stderr: string;   // the last 8 kB: where tensor_dap's one-line error is
}

/** Runs PYTHON ARGS as a task whose terminal shows its output; resolves when it exits. */
function runInTask(label: string, folder: vscode.WorkspaceFolder | undefined, python: string, args: string[], cwd: string): Promise<RunResult> {
    return new Promise((resolve, reject) => {
        const write = new vscode.EventEmitter<string>();
        const close = new vscode.EventEmitter<number>();
        let stderr = '';
        let settled = false;
        let stopped = false;
        const finish = (r: Omit<RunResult, 'stderr' | 'cancelled'>) => {
            if (!settled) {
                settled = true;
                resolve({ ...r, stderr, cancelled: stopped });
            }
        };
        let kill: (() => void) | undefined;
        const pty: vscode.Pseudoterminal = {
            onDidWrite: write.event,
            onDidClose: close.event,
            open: () => {
                write.fire(`${[python, ...args].map(quote).join(' ')}\r\n\r\n`);
                const child = spawn(python, args, { cwd, env: { ...process.env, PYTHONUNBUFFERED: '1' } });
                kill = () => child.kill();
                const show = (d: string) => write.fire(d.replace(/\r?\n/g, '\r\n'));
                child.stdout.setEncoding('utf8').on('data', show);
                child.stderr.setEncoding('utf8').on('data', (d: string) => {
                    stderr = (stderr + d).slice(-8192);
                    show(d);
                });
                child.on('error', (e: NodeJS.ErrnoException) => {
                    write.fire(`${e.message}\r\n`);
                    close.fire(1);
                    finish({ spawnError: e.code ?? e.message });
                });
                child.on('close', (code) => {
                    write.fire(`\r\n[exit code ${code ?? 'none: stopped'}]\r\n`);
                    close.fire(code ?? 1);
                    finish({ code: code ?? undefined });
                });
            },
            close: () => {
                stopped = true;
                kill?.();
            },
        };
        const task = new vscode.Task({ type: 'tensorDap', args }, folder ?? vscode.TaskScope.Workspace, label, 'tensor_dap',
            new vscode.CustomExecution(async () => pty));
        task.presentationOptions = { reveal: vscode.TaskRevealKind.Always, panel: vscode.TaskPanelKind.Dedicated, clear: true };
        vscode.tasks.executeTask(task).then(undefined, reject);
    });
}

/**
 * The profile the run wrote: from the manifest of the newest run folder made under
 * CWD/.tensor_dap/profiles since the run started (the command's default --out, made before the
 * program runs), else from the manifest or profiler files the watcher saw (a program that set
 * another folder through the environment).
 */
async function outputOf(cwd: string, since: number, created: vscode.Uri[]): Promise<vscode.Uri | undefined> {
    const runs = path.join(cwd, '.tensor_dap', 'profiles');
    const folders = await fs.readdir(runs, { withFileTypes: true }).catch(() => []);
    const recent = await Promise.all(folders.filter((d) => d.isDirectory()).map(async (d) => {
        const manifest = path.join(runs, d.name, 'profile.json');
        const stat = await fs.stat(manifest).catch(() => undefined);
        return { manifest: vscode.Uri.file(manifest), mtime: stat?.mtimeMs ?? -Infinity };
    }));
    const newest = recent.filter((r) => r.mtime >= since - 2000).sort((a, b) => b.mtime - a.mtime)[0];
    const seen = [...created].reverse().find((u) => path.basename(u.fsPath) === 'profile.json');
    for (const manifest of [newest?.manifest, seen]) {
        if (manifest) {
            const first = await viewableIn(manifest);
            if (first) {
                return first;
            }
        }
    }
    return [...created].reverse().find((u) => VIEWABLE.test(u.fsPath));
}

async function viewableIn(manifest: vscode.Uri): Promise<vscode.Uri | undefined> {
    try {
        const files = (JSON.parse(new TextDecoder().decode(await vscode.workspace.fs.readFile(manifest))) as { files?: unknown }).files;
        const first = Array.isArray(files) ? files.find((f): f is string => typeof f === 'string' && VIEWABLE.test(f)) : undefined;
        return first ? vscode.Uri.joinPath(manifest, '..', first) : undefined;
    } catch {
        return undefined;  // an unreadable manifest: the caller falls back to the files seen
    }
}
