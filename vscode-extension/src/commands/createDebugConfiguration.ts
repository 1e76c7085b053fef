/** "tensor_dap: Create Debug Configuration": merges the chosen templates into .vscode/launch.json. */
import * as vscode from 'vscode';
import { LaunchJsonError, mergeLaunchJson, Templates } from '../debug/launchTemplates';

export async function createDebugConfiguration(templates: Templates, names?: string[]): Promise<void> {
    const folder = await pickFolder();
    if (!folder) {
        return;
    }
    let chosen = names;
    if (!chosen) {
        const picks = await vscode.window.showQuickPick(
            templates.configurations.map((c) => ({ label: c.name, description: describe(c), picked: true })),
            { canPickMany: true, title: 'tensor_dap: add these configurations to .vscode/launch.json' });
        if (!picks?.length) {
            return;
        }
        chosen = picks.map((p) => p.label);
    }
    const uri = vscode.Uri.joinPath(folder.uri, '.vscode', 'launch.json');
    const open = vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri.toString());
    let existing: string | undefined = open?.getText();
    if (existing === undefined) {
        try {
            existing = new TextDecoder().decode(await vscode.workspace.fs.readFile(uri));
        } catch {
            existing = undefined;  // no launch.json yet
        }
    }
    let result;
    try {
        result = mergeLaunchJson(existing, templates, chosen);
    } catch (e) {
        if (e instanceof LaunchJsonError) {
            void vscode.window.showErrorMessage(`tensor_dap: ${e.message}`);
            return;
        }
        throw e;
    }
    if (open) {
        const edit = new vscode.WorkspaceEdit();
        edit.replace(uri, new vscode.Range(open.positionAt(0), open.positionAt(open.getText().length)), result.text);
        await vscode.workspace.applyEdit(edit);
        await open.save();
    } else {
        await vscode.workspace.fs.writeFile(uri, new TextEncoder().encode(result.text));
    }
    await vscode.window.showTextDocument(uri, { preview: false });
    const kept = result.kept.length ? ` (kept your own ${result.kept.map((k) => `"${k}"`).join(', ')})` : '';
    void vscode.window.showInformationMessage(result.added.length
        ? `tensor_dap: added ${result.added.length} configuration${result.added.length > 1 ? 's' : ''} to launch.json${kept}.`
        : `tensor_dap: launch.json already has these configurations${kept}.`);
}

function describe(c: { request: string; module?: unknown; args?: unknown }): string {
    const args = Array.isArray(c.args) ? c.args.join(' ') : typeof c.args === 'string' ? c.args : '';
    return c.request === 'attach' ? 'attach to a debugpy listening on port 5678' : `${String(c.module ?? '')} ${args}`.trim();
}

async function pickFolder(): Promise<vscode.WorkspaceFolder | undefined> {
    const folders = vscode.workspace.workspaceFolders ?? [];
    if (folders.length <= 1) {
        if (!folders.length) {
            void vscode.window.showErrorMessage('tensor_dap: open a folder first; launch.json lives in its .vscode folder.');
        }
        return folders[0];
    }
    return vscode.window.showWorkspaceFolderPick({ placeHolder: 'Which folder’s launch.json?' });
}
