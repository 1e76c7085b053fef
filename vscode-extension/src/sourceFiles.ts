/**
 * Finding the source file a profile names. Profiles record absolute paths from the machine and
 * checkout they were taken in; this looks for the same path, then relative to the profile and
 * the workspace, then for the workspace file sharing the longest path tail with it.
 */
import * as path from 'path';
import * as vscode from 'vscode';
import { matchProfiledFile } from './views/lineProfile';

/** Built-ins and generated code have no file: "~", "<string>", "<frozen runpy>". */
export function hasSource(file: string): boolean {
    return file !== '~' && file !== '' && !/^<.*>$/.test(file);
}

export async function findSource(file: string, relativeTo?: vscode.Uri): Promise<vscode.Uri | undefined> {
    if (!hasSource(file)) {
        return undefined;
    }
    const candidates: vscode.Uri[] = [];
    if (path.isAbsolute(file)) {
        candidates.push(vscode.Uri.file(file));
    } else {
        if (relativeTo) {
            candidates.push(vscode.Uri.file(path.join(path.dirname(relativeTo.fsPath), file)));
        }
        for (const folder of vscode.workspace.workspaceFolders ?? []) {
            candidates.push(vscode.Uri.joinPath(folder.uri, file));
        }
    }
    for (const uri of candidates) {
        if (await exists(uri)) {
            return uri;
        }
    }
    const found = await vscode.workspace.findFiles(`**/${globEscape(path.basename(file))}`, '**/{node_modules,.git,.venv,venv}/**', 200);
    const best = matchProfiledFile(found.map((u) => u.fsPath), file);
    return best ? vscode.Uri.file(best) : undefined;
}

export async function readSourceLines(file: string, first: number, last: number, relativeTo?: vscode.Uri): Promise<string[] | null> {
    const uri = await findSource(file, relativeTo);
    if (!uri) {
        return null;
    }
    try {
        const text = new TextDecoder().decode(await vscode.workspace.fs.readFile(uri));
        return text.split(/\r?\n/).slice(first - 1, last);
    } catch {
        return null;
    }
}

export async function openSource(file: string, line: number, relativeTo?: vscode.Uri): Promise<vscode.TextEditor | undefined> {
    const uri = await findSource(file, relativeTo);
    if (!uri) {
        void vscode.window.showInformationMessage(hasSource(file)
            ? `tensor_dap: ${file} is not in this workspace.`
            : `tensor_dap: ${file === '~' ? 'a built-in function' : file} has no source file.`);
        return undefined;
    }
    const position = new vscode.Position(Math.max(0, line - 1), 0);
    return vscode.window.showTextDocument(uri, {
        selection: new vscode.Range(position, position),
        viewColumn: vscode.ViewColumn.Beside,
        preserveFocus: false,
    });
}

async function exists(uri: vscode.Uri): Promise<boolean> {
    try {
        return (await vscode.workspace.fs.stat(uri)).type !== vscode.FileType.Directory;
    } catch {
        return false;
    }
}

function globEscape(name: string): string {
    return name.replace(/[[\]{}*?!]/g, (c) => `[${c}]`);
}
