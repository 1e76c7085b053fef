/**
 * Line-profile decorations in the source editor: after each profiled line its time, share of
 * the function and hits, and a background whose heat follows that share. One line profile is
 * shown at a time (the last one opened); "tensor_dap: Toggle Line Profile Decorations" turns
 * them off and on.
 */
import * as vscode from 'vscode';
import type { LprofModel } from './parsers/lprof';
import { HEAT_LEVELS, lineMarks, matchProfiledFile } from './views/lineProfile';

const CONTEXT_KEY = 'tensorDap.lineProfileShown';

export class LineDecorations implements vscode.Disposable {
    private model: LprofModel | undefined;
    private source: vscode.Uri | undefined;
    private shown = false;
    private readonly levels: vscode.TextEditorDecorationType[];
    private readonly subscriptions: vscode.Disposable[];

    constructor() {
        this.levels = Array.from({ length: HEAT_LEVELS }, (_, level) => vscode.window.createTextEditorDecorationType({
            isWholeLine: true,
            // transparent red to orange: readable over light and dark themes
            backgroundColor: level === 0 ? undefined : `rgba(255, ${110 - level * 15}, 40, ${(0.05 + 0.07 * level).toFixed(2)})`,
            overviewRulerColor: level >= 3 ? `rgba(255, 80, 40, 0.8)` : undefined,
            overviewRulerLane: vscode.OverviewRulerLane.Right,
            after: { color: new vscode.ThemeColor('editorCodeLens.foreground'), margin: '0 0 0 3em', fontStyle: 'italic' },
        }));
        this.subscriptions = [
            vscode.window.onDidChangeVisibleTextEditors(() => this.render()),
            vscode.workspace.onDidChangeTextDocument((e) => {
                if (this.shown && vscode.window.visibleTextEditors.some((ed) => ed.document === e.document)) {
                    this.render();
                }
            }),
        ];
        void vscode.commands.executeCommand('setContext', CONTEXT_KEY, false);
    }

    get current(): vscode.Uri | undefined {
        return this.source;
    }

    get isShown(): boolean {
        return this.shown;
    }

    /** Makes this line profile the one decorated, and shows it. */
    show(model: LprofModel, source: vscode.Uri): void {
        this.model = model;
        this.source = source;
        this.setShown(true);
    }

    toggle(): boolean {
        this.setShown(!this.shown && this.model !== undefined);
        return this.shown;
    }

    /** Lines of `doc` that carry a mark (for tests and the status message). */
    marksFor(doc: vscode.TextDocument): number {
        const file = this.fileFor(doc);
        return file && this.model ? lineMarks(this.model, file).length : 0;
    }

    private setShown(shown: boolean): void {
        this.shown = shown;
        void vscode.commands.executeCommand('setContext', CONTEXT_KEY, shown);
        this.render();
    }

    private fileFor(doc: vscode.TextDocument): string | undefined {
        if (!this.model || doc.uri.scheme !== 'file') {
            return undefined;
        }
        return matchProfiledFile([...new Set(this.model.functions.map((f) => f.file))], doc.uri.fsPath);
    }

    private render(): void {
        for (const editor of vscode.window.visibleTextEditors) {
            const file = this.shown ? this.fileFor(editor.document) : undefined;
            const byLevel: vscode.DecorationOptions[][] = this.levels.map(() => []);
            if (file && this.model) {
                for (const mark of lineMarks(this.model, file)) {
                    if (mark.line < 1 || mark.line > editor.document.lineCount) {
                        continue;
                    }
                    const line = editor.document.lineAt(mark.line - 1);
                    byLevel[mark.heat].push({
                        range: line.range,
                        hoverMessage: new vscode.MarkdownString(`**line profile** · ${mark.label}`),
                        renderOptions: { after: { contentText: mark.label } },
                    });
                }
            }
            this.levels.forEach((type, level) => editor.setDecorations(type, byLevel[level]));
        }
    }

    dispose(): void {
        this.subscriptions.forEach((s) => s.dispose());
        this.levels.forEach((l) => l.dispose());
    }
}
