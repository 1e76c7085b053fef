/**
 * The tensor inspector: while a debugpy session is paused, the "Tensors" view lists the tensors
 * of the selected frame with their one-line summaries; selecting one opens a page with its
 * statistics, histogram and heatmap. Both come from tensor_dap.dap.inspector, evaluated in the
 * frame through DAP `evaluate` (context "clipboard", so debugpy does not shorten the answer);
 * binning happens in the debuggee, so only a few kilobytes cross the protocol.
 */
import * as vscode from 'vscode';
import type { HostMessage } from '../webview/messages';
import { onMessage, post, setUpWebview } from '../webview/panel';
import { explainEvaluateError, FrameTensor, frameExpression, parseFrameTensors, parseTensorDetail, tensorExpression } from './inspectorModel';
import { decodeJsonResult } from './pyRepr';

interface Frame {
    session: vscode.DebugSession;
    frameId: number;
}

type Row = { kind: 'tensor'; tensor: FrameTensor; frame: Frame } | { kind: 'note'; text: string; tooltip?: string };

export class TensorInspector implements vscode.TreeDataProvider<Row>, vscode.Disposable {
    private readonly changed = new vscode.EventEmitter<void>();
    readonly onDidChangeTreeData = this.changed.event;
    private rows: Row[] = [];
    private frame: Frame | undefined;
    private generation = 0;
    private panel: vscode.WebviewPanel | undefined;
    private panelTensor: { tensor: FrameTensor; frame: Frame } | undefined;
    private readonly subscriptions: vscode.Disposable[];

    constructor(private readonly extensionUri: vscode.Uri) {
        this.subscriptions = [
            vscode.debug.onDidChangeActiveStackItem(() => void this.refresh()),
            vscode.debug.onDidTerminateDebugSession((s) => {
                if (this.frame?.session.id === s.id) {
                    this.show(undefined, [{ kind: 'note', text: 'The debug session ended.' }]);
                }
            }),
        ];
    }

    getTreeItem(row: Row): vscode.TreeItem {
        if (row.kind === 'note') {
            const item = new vscode.TreeItem(row.text);
            item.tooltip = row.tooltip ?? row.text;
            item.iconPath = new vscode.ThemeIcon('info');
            return item;
        }
        const t = row.tensor;
        const item = new vscode.TreeItem(t.name);
        item.description = t.line ?? `${t.shape ? `[${t.shape.join(', ')}]` : ''} ${t.dtype} ${t.device} (not summarized: the frame's time budget ran out)`;
        item.tooltip = [t.line ?? '', `${t.dtype} on ${t.device}`, t.flags.join(', ')].filter(Boolean).join('\n');
        item.iconPath = new vscode.ThemeIcon(t.line && /NaN!|Inf!/.test(t.line) ? 'warning' : 'symbol-array');
        item.contextValue = 'tensorDap.tensor';
        item.command = { command: 'tensorDap.inspectTensor', title: 'Inspect Tensor', arguments: [row] };
        return item;
    }

    getChildren(parent?: Row): Row[] {
        if (parent) {
            return [];
        }
        return this.rows.length ? this.rows : [{ kind: 'note', text: 'Pause a Python (debugpy) session to list the tensors of the selected frame.' }];
    }

    /** Reads the tensors of the frame selected in the Call Stack view. */
    async refresh(): Promise<void> {
        const generation = ++this.generation;
        const item = vscode.debug.activeStackItem;
        if (!(item instanceof vscode.DebugStackFrame) || item.session.type !== 'debugpy') {
            this.show(undefined, []);
            return;
        }
        const frame = { session: item.session, frameId: item.frameId };
        this.show(frame, [{ kind: 'note', text: 'Reading the frame’s tensors…' }]);
        let rows: Row[];
        try {
            const data = parseFrameTensors(await evaluate(frame, frameExpression()));
            rows = data.tensors.map((tensor): Row => ({ kind: 'tensor', tensor, frame }));
            if (!rows.length) {
                rows.push({ kind: 'note', text: 'No tensors in this frame.' });
            }
            if (data.more) {
                rows.push({ kind: 'note', text: `… and ${data.more} more tensors` });
            }
            if (data.cutShort) {
                rows.push({ kind: 'note', text: 'Some summaries were skipped to keep the debugger responsive.' });
            }
        } catch (e) {
            const message = (e as Error).message;
            rows = [{ kind: 'note', text: message.split('\n')[0], tooltip: message }];
        }
        if (generation === this.generation) {
            this.show(frame, rows);
        }
    }

    private show(frame: Frame | undefined, rows: Row[]): void {
        this.frame = frame;
        this.rows = rows;
        this.changed.fire();
    }

    /** Opens (or reuses) the tensor page for a row of the view. */
    async inspect(row: Row | undefined): Promise<void> {
        if (!row || row.kind !== 'tensor') {
            return;
        }
        if (!this.panel) {
            this.panel = vscode.window.createWebviewPanel('tensorDap.tensor', 'Tensor', { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true }, {
                enableScripts: true, retainContextWhenHidden: true,
            });
            setUpWebview(this.panel.webview, this.extensionUri, 'tensor', 'Tensor');
            const panel = this.panel;
            const sub = onMessage(panel.webview, async (m) => {
                if ((m.type === 'ready' || m.type === 'refreshTensor' || m.type === 'action') && this.panelTensor) {
                    await this.load(panel, this.panelTensor.tensor, this.panelTensor.frame);
                }
            });
            panel.onDidDispose(() => {
                sub.dispose();
                this.panel = undefined;
            });
        } else {
            this.panel.reveal(undefined, true);
            await this.load(this.panel, row.tensor, row.frame);
        }
        this.panelTensor = { tensor: row.tensor, frame: row.frame };
        this.panel.title = `Tensor ${row.tensor.name}`;
    }

    private async load(panel: vscode.WebviewPanel, tensor: FrameTensor, frame: Frame): Promise<void> {
        void post(panel.webview, { type: 'loading', what: `Reading ${tensor.name}…` });
        const config = vscode.workspace.getConfiguration('tensorDap.inspector');
        let message: HostMessage;
        try {
            const detail = parseTensorDetail(await evaluate(frame, tensorExpression(tensor.expr, config.get('bins', 64), config.get('heatmapSize', 64))));
            message = { type: 'tensor', name: tensor.name, expr: tensor.expr, frame: frame.session.name, detail };
        } catch (e) {
            message = { type: 'error', title: `${tensor.name} cannot be inspected`, message: (e as Error).message, actions: ['retry'] };
        }
        void post(panel.webview, message);
    }

    dispose(): void {
        this.subscriptions.forEach((s) => s.dispose());
        this.panel?.dispose();
        this.changed.dispose();
    }
}

async function evaluate(frame: Frame, expression: string): Promise<unknown> {
    let response: { result?: string };
    try {
        response = await frame.session.customRequest('evaluate', { expression, frameId: frame.frameId, context: 'clipboard' }) as { result?: string };
    } catch (e) {
        throw new Error(explainEvaluateError((e as Error).message ?? String(e)));
    }
    if (typeof response?.result !== 'string') {
        throw new Error('the debugger returned no value');
    }
    if (/^(Traceback|[A-Za-z]*Error:)/.test(response.result)) {
        throw new Error(explainEvaluateError(response.result));
    }
    return decodeJsonResult(response.result);
}
