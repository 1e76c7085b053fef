/** Wires tensor_dap's editors, views, commands and debug configurations into VS Code. */
import { readFileSync } from 'fs';
import * as vscode from 'vscode';
import { createDebugConfiguration } from './commands/createDebugConfiguration';
import { openTensorBoard } from './commands/openTensorBoard';
import { profileCurrentFile } from './commands/profileCurrentFile';
import { ConfigProvider } from './debug/configProvider';
import { TensorInspector } from './debug/inspector';
import { parseTemplates, Templates } from './debug/launchTemplates';
import { incidentKind, lprofKind, memoryKind, profKind, traceKind } from './editors/kinds';
import { ReadonlyEditor } from './editors/readonlyEditor';
import { Incident, IncidentsTree, replayIncident } from './incidents';
import { LineDecorations } from './lineDecorations';
import { parseLprof } from './parsers/lprof';

export function activate(context: vscode.ExtensionContext): void {
    let templates: Templates | undefined;
    const getTemplates = () => (templates ??= parseTemplates(readFileSync(vscode.Uri.joinPath(context.extensionUri, 'dist', 'launch_templates.json').fsPath, 'utf8')));
    const decorations = new LineDecorations();
    const incidents = new IncidentsTree();
    const inspector = new TensorInspector(context.extensionUri);
    const replay = (bundle: vscode.Uri) => replayIncident(context, bundle);
    context.subscriptions.push(decorations, incidents, inspector);

    ReadonlyEditor.register(context, profKind());
    ReadonlyEditor.register(context, lprofKind(decorations));
    ReadonlyEditor.register(context, traceKind());
    ReadonlyEditor.register(context, memoryKind());
    ReadonlyEditor.register(context, incidentKind(replay));
    context.subscriptions.push(
        vscode.window.registerTreeDataProvider('tensorDap.incidents', incidents),
        vscode.window.registerTreeDataProvider('tensorDap.tensors', inspector),
        // Dynamic only: the F5 list. resolveDebugConfiguration still sees every debugpy launch.
        vscode.debug.registerDebugConfigurationProvider('debugpy', new ConfigProvider(getTemplates, context.workspaceState),
            vscode.DebugConfigurationProviderTriggerKind.Dynamic),
        command('tensorDap.profileCurrentFile', profileCurrentFile),
        command('tensorDap.openTensorBoard', openTensorBoard),
        command('tensorDap.createDebugConfiguration', () => createDebugConfiguration(getTemplates())),
        command('tensorDap.toggleLineProfile', () => toggleLineProfile(decorations)),
        command('tensorDap.refreshIncidents', () => incidents.refresh()),
        command('tensorDap.replayIncident', (item?: Incident) => (item ? replay(item.bundle) : undefined)),
        command('tensorDap.refreshTensors', () => inspector.refresh()),
        command('tensorDap.inspectTensor', (row) => inspector.inspect(row)),
    );
}

export function deactivate(): void {
    // everything is disposed through context.subscriptions
}

/** Registers a command whose failures become an error message, never an unhandled rejection. */
function command(id: string, run: (...args: never[]) => unknown): vscode.Disposable {
    return vscode.commands.registerCommand(id, async (...args: never[]) => {
        try {
            await run(...args);
        } catch (e) {
            void vscode.window.showErrorMessage(`tensor_dap: ${(e as Error).message ?? String(e)}`);
        }
    });
}

async function toggleLineProfile(decorations: LineDecorations): Promise<void> {
    if (decorations.current) {
        const shown = decorations.toggle();
        vscode.window.setStatusBarMessage(`tensor_dap: line profile ${shown ? 'shown' : 'hidden'}`, 3000);
        return;
    }
    // Nothing loaded yet: pick a .lprof from the workspace.
    const files = await vscode.workspace.findFiles('**/*.lprof', '**/{node_modules,.git}/**', 50);
    const pick = files.length === 1 ? { uri: files[0] } : await vscode.window.showQuickPick(
        files.map((uri) => ({ label: vscode.workspace.asRelativePath(uri), uri })), { title: 'Show which line profile?' });
    if (!pick) {
        if (!files.length) {
            void vscode.window.showInformationMessage('tensor_dap: no .lprof file in this workspace; run "tensor_dap: Profile Current File" with mode "line".');
        }
        return;
    }
    const model = parseLprof(await vscode.workspace.fs.readFile(pick.uri));
    decorations.show(model, pick.uri);
}
