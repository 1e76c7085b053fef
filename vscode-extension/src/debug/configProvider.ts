/**
 * Offers tensor_dap's launch configurations in the F5 list ("Run and Debug" → debugpy) without
 * a launch.json, and fills the GPU-box template's remote path when it still holds the
 * placeholder. Contributes no configurationSnippets: the Python Debugger extension owns that
 * key for "debugpy", and VS Code does not merge such arrays across extensions.
 */
import * as vscode from 'vscode';
import { LaunchConfig, Templates, template } from './launchTemplates';

export const DYNAMIC = ['Debug Training (tensor_dap)', 'Attach to GPU box (SSH tunnel)'];
export const REMOTE_PLACEHOLDER = '/ABSOLUTE/PATH/OF/THE/PROJECT/ON/THE/GPU/BOX';

export class ConfigProvider implements vscode.DebugConfigurationProvider {
    constructor(private readonly templates: () => Templates, private readonly state: vscode.Memento) {}

    provideDebugConfigurations(folder: vscode.WorkspaceFolder | undefined): vscode.DebugConfiguration[] {
        if (!folder && vscode.workspace.workspaceFolders?.length) {
            return [];  // asked again for "user settings": the folder's entries are enough
        }
        return DYNAMIC.map((name) => template(this.templates(), name));
    }

    async resolveDebugConfiguration(_folder: vscode.WorkspaceFolder | undefined, config: vscode.DebugConfiguration): Promise<vscode.DebugConfiguration | undefined> {
        const mappings = (config as LaunchConfig).pathMappings as { localRoot?: string; remoteRoot?: string }[] | undefined;
        const placeholder = Array.isArray(mappings) ? mappings.find((m) => m?.remoteRoot === REMOTE_PLACEHOLDER) : undefined;
        if (!placeholder) {
            return config;  // every other debugpy configuration passes through untouched
        }
        const remembered = this.state.get<string>('tensorDap.remoteRoot');
        const remoteRoot = await vscode.window.showInputBox({
            title: 'Attach to GPU box',
            prompt: 'Absolute path of this project on the GPU box (tunnel first: ssh -L 5678:127.0.0.1:5678 gpu-box)',
            value: remembered ?? '',
            validateInput: (v) => (v.startsWith('/') || /^[A-Za-z]:[\\/]/.test(v) ? undefined : 'an absolute path, e.g. /home/me/project'),
        });
        if (!remoteRoot) {
            return undefined;
        }
        await this.state.update('tensorDap.remoteRoot', remoteRoot);
        placeholder.remoteRoot = remoteRoot;
        return config;
    }
}
