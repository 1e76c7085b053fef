/**
 * The "tensor_dap Incidents" view: every bundle under the workspace folders'
 * `.tensor_dap/incidents/`, newest first, opening into the incident editor; and replaying one
 * in the debugger.
 */
import * as path from 'path';
import * as vscode from 'vscode';
import { replayConfiguration } from './debug/replayConfig';
import { IncidentReport, parseIncidentReport, where } from './parsers/incident';

const INCIDENTS = ['.tensor_dap', 'incidents'];

export interface Incident {
    folder: vscode.WorkspaceFolder;
    bundle: vscode.Uri;
    report: IncidentReport | undefined;   // undefined: report.json unreadable
    error?: string;
    sortKey: number;
}

export class IncidentsTree implements vscode.TreeDataProvider<Incident>, vscode.Disposable {
    private readonly changed = new vscode.EventEmitter<void>();
    readonly onDidChangeTreeData = this.changed.event;
    private readonly watcher = vscode.workspace.createFileSystemWatcher('**/.tensor_dap/incidents/*/report.json');
    private timer: NodeJS.Timeout | undefined;

    constructor() {
        const refresh = () => {
            clearTimeout(this.timer);
            this.timer = setTimeout(() => this.refresh(), 300);
        };
        this.watcher.onDidCreate(refresh);
        this.watcher.onDidChange(refresh);
        this.watcher.onDidDelete(refresh);
    }

    refresh(): void {
        this.changed.fire();
    }

    getTreeItem(i: Incident): vscode.TreeItem {
        const name = path.basename(i.bundle.fsPath);
        const r = i.report;
        const item = new vscode.TreeItem(r ? `${r.step !== undefined ? `step ${r.step} · ` : ''}${r.headline}` : name);
        item.description = r ? [where(r), r.created ? new Date(r.created * 1000).toLocaleString() : name].filter(Boolean).join(' · ') : i.error;
        item.tooltip = new vscode.MarkdownString();
        item.tooltip.appendText(`${name}\n${r ? r.headline : i.error ?? ''}`);
        item.iconPath = new vscode.ThemeIcon(r ? 'flame' : 'warning');
        item.contextValue = 'tensorDap.incident';
        item.resourceUri = vscode.Uri.joinPath(i.bundle, 'report.json');
        item.command = { command: 'vscode.openWith', title: 'Open Incident', arguments: [item.resourceUri, 'tensorDap.incident'] };
        return item;
    }

    async getChildren(parent?: Incident): Promise<Incident[]> {
        if (parent) {
            return [];
        }
        const all: Incident[] = [];
        for (const folder of vscode.workspace.workspaceFolders ?? []) {
            const root = vscode.Uri.joinPath(folder.uri, ...INCIDENTS);
            let entries: [string, vscode.FileType][];
            try {
                entries = await vscode.workspace.fs.readDirectory(root);
            } catch {
                continue;
            }
            for (const [name, type] of entries) {
                if (type !== vscode.FileType.Directory || name.startsWith('.')) {
                    continue;  // .partial-* folders are bundles still being written
                }
                all.push(await readIncident(folder, vscode.Uri.joinPath(root, name)));
            }
        }
        return all.sort((a, b) => b.sortKey - a.sortKey);
    }

    dispose(): void {
        clearTimeout(this.timer);
        this.watcher.dispose();
        this.changed.dispose();
    }
}

async function readIncident(folder: vscode.WorkspaceFolder, bundle: vscode.Uri): Promise<Incident> {
    const reportUri = vscode.Uri.joinPath(bundle, 'report.json');
    let mtime = 0;
    try {
        mtime = (await vscode.workspace.fs.stat(reportUri)).mtime / 1000;
        const report = parseIncidentReport(new TextDecoder().decode(await vscode.workspace.fs.readFile(reportUri)));
        return { folder, bundle, report, sortKey: report.created ?? mtime };
    } catch (e) {
        return { folder, bundle, report: undefined, error: (e as Error).message, sortKey: mtime };
    }
}

const TRUST_AND_REPLAY = 'Unpickle and Replay';

/** Whether the bundle keeps Python objects that only a trusted replay unpickles (objects.pt). */
async function keepsObjects(bundle: vscode.Uri): Promise<boolean> {
    try {
        await vscode.workspace.fs.stat(vscode.Uri.joinPath(bundle, 'objects.pt'));
        return true;
    } catch {
        return false;
    }
}

/** Starts a debug session that replays the bundle (see debug/replayConfig.ts for how). */
export async function replayIncident(context: vscode.ExtensionContext, bundle: vscode.Uri): Promise<void> {
    const folder = vscode.workspace.getWorkspaceFolder(bundle);
    const reportUri = vscode.Uri.joinPath(bundle, 'report.json');
    const report = parseIncidentReport(new TextDecoder().decode(await vscode.workspace.fs.readFile(reportUri)));
    const key = `tensorDap.replayProgram:${folder?.uri.toString() ?? ''}`;
    let program = report.program || vscode.workspace.getConfiguration('tensorDap', bundle).get<string>('replay.program') || context.workspaceState.get<string>(key);
    if (program && folder && !path.isAbsolute(program)) {
        program = path.join(folder.uri.fsPath, program);
    }
    if (!program) {
        const picked = await vscode.window.showOpenDialog({
            title: 'Replay incident: which training script wraps its steps in tensor_dap.watch?',
            defaultUri: folder?.uri, canSelectMany: false, filters: { Python: ['py'] }, openLabel: 'Replay with this script',
        });
        if (!picked?.length) {
            return;
        }
        program = picked[0].fsPath;
        await context.workspaceState.update(key, program);
    }
    const trust = await keepsObjects(bundle);
    if (trust && await vscode.window.showWarningMessage(
        'This incident bundle keeps objects of your program\'s own classes (objects.pt). Replaying it unpickles them, '
        + 'which runs code: replay only a bundle you wrote.', { modal: true }, TRUST_AND_REPLAY) !== TRUST_AND_REPLAY) {
        return;
    }
    const config = replayConfiguration(bundle.fsPath, report, program, folder?.uri.fsPath ?? path.dirname(program), trust);
    const started = await vscode.debug.startDebugging(folder, config);
    if (!started) {
        void vscode.window.showErrorMessage('tensor_dap: the replay session did not start (is the Python Debugger extension installed?).');
    }
}
