// Shared by every page: the message channel, a DOM builder that only ever sets text (never
// markup, so nothing from a file is parsed as HTML), the loading and error views, number
// formats and a virtualised table for long lists.
import type { ErrorAction, HostMessage, WebviewMessage } from '../src/webview/messages';

interface VsCodeApi {
    postMessage(message: WebviewMessage): void;
}
declare function acquireVsCodeApi(): VsCodeApi;
const vscode = acquireVsCodeApi();

export function send(message: WebviewMessage): void {
    vscode.postMessage(message);
}

type Child = Node | string | number | null | undefined | false;
type Attrs = { class?: string; title?: string; [attr: string]: string | number | boolean | undefined | ((e: Event) => void) };

/** h('td', {class: 'num'}, text): strings become text nodes; on* attributes become listeners. */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
    const el = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
        if (value === undefined || value === false) {
            continue;
        }
        if (typeof value === 'function') {
            el.addEventListener(key.slice(2), value);
        } else {
            el.setAttribute(key, String(value));
        }
    }
    for (const c of children) {
        if (c !== null && c !== undefined && c !== false) {
            el.append(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
        }
    }
    return el;
}

export function app(): HTMLElement {
    return document.getElementById('app')!;
}

export function replace(...children: Child[]): void {
    const root = app();
    root.replaceChildren();
    for (const c of children) {
        if (c !== null && c !== undefined && c !== false) {
            root.append(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
        }
    }
}

const ACTION_LABELS: Record<ErrorAction, string> = {
    reopenAsText: 'Open as Text', retry: 'Try Again', openSettings: 'Set tensorDap.pythonPath',
};

/** Starts a page: says ready, draws loading and error messages itself, the rest through `render`. */
export function start(render: (m: HostMessage) => void): void {
    window.addEventListener('message', (event: MessageEvent<HostMessage>) => {
        const m = event.data;
        try {
            if (m.type === 'loading') {
                replace(h('p', { class: 'muted loading' }, m.what));
            } else if (m.type === 'error') {
                replace(errorView(m.title, m.message, m.detail, m.actions));
            } else {
                render(m);
            }
        } catch (e) {
            replace(errorView('This view failed to draw', String((e as Error).message ?? e), (e as Error).stack, []));
        }
    });
    send({ type: 'ready' });
}

function errorView(title: string, message: string, detail: string | undefined, actions: ErrorAction[]): HTMLElement {
    return h('section', { class: 'error', role: 'alert' },
        h('h2', {}, title),
        h('pre', { class: 'message' }, message),
        detail ? h('details', {}, h('summary', {}, 'Details'), h('pre', {}, detail)) : null,
        h('div', { class: 'actions' }, ...actions.map((a) => h('button', { onclick: () => send({ type: 'action', action: a }) }, ACTION_LABELS[a]))));
}

export function fmtSeconds(s: number): string {
    if (!Number.isFinite(s)) { return String(s); }
    const a = Math.abs(s);
    if (a >= 100) { return `${s.toFixed(0)} s`; }
    if (a >= 1) { return `${s.toFixed(2)} s`; }
    if (a >= 1e-3) { return `${(s * 1e3).toFixed(a >= 0.1 ? 0 : 1)} ms`; }
    if (a >= 1e-6) { return `${(s * 1e6).toFixed(1)} µs`; }
    return s === 0 ? '0' : `${(s * 1e9).toFixed(0)} ns`;
}

export function fmtMicros(us: number): string {
    return fmtSeconds(us / 1e6);
}

export function fmtBytes(b: number): string {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let v = b;
    let i = 0;
    while (Math.abs(v) >= 1024 && i < units.length - 1) {
        v /= 1024;
        i++;
    }
    return `${i ? v.toFixed(v >= 100 ? 0 : 1) : v} ${units[i]}`;
}

export function fmtCount(n: number): string {
    return n.toLocaleString('en-US');
}

export function fmtPercent(part: number, whole: number): string {
    return whole > 0 ? `${((100 * part) / whole).toFixed(1)}%` : '';
}

export function baseName(path: string): string {
    return path.split(/[\\/]/).pop() ?? path;
}

/** A link-looking button that asks the host to open a source line. */
export function sourceLink(file: string, line: number, label?: string): HTMLElement {
    const linkable = file !== '~' && file !== '' && !/^<.*>$/.test(file);
    const text = label ?? `${baseName(file)}:${line}`;
    return linkable
        ? h('a', { href: '#', class: 'source', title: `${file}:${line}`, onclick: (e) => { e.preventDefault(); send({ type: 'openSource', file, line }); } }, text)
        : h('span', { class: 'muted', title: file }, text);
}

export interface Column<R> {
    title: string;
    numeric?: boolean;
    width?: string;
    value(row: R): number | string;   // for sorting
    cell(row: R): Child;
    tooltip?: string;
}

/**
 * A table that renders only the rows in view (50,000 rows stay instant), sortable by any
 * column (click a header), with an optional text filter and row selection.
 */
export class VirtualTable<R> {
    readonly element: HTMLElement;
    private rows: R[];
    private view: R[];
    private sortColumn: number;
    private descending = true;
    private readonly body: HTMLElement;
    private readonly spacer: HTMLElement;
    private readonly header: HTMLElement;
    private selected: R | undefined;
    private readonly rowHeight = 22;

    constructor(private readonly columns: Column<R>[], rows: R[], opts: { sortBy: number; onSelect?: (row: R) => void; label: string; height?: string }) {
        this.rows = rows;
        this.view = rows;
        this.sortColumn = opts.sortBy;
        this.header = h('div', { class: 'vt-row vt-header', role: 'row' });
        this.spacer = h('div', { class: 'vt-spacer' });
        this.body = h('div', { class: 'vt-body', role: 'rowgroup' });
        const scroller = h('div', { class: 'vt-scroll', tabindex: 0, 'aria-label': opts.label }, this.spacer, this.body);
        if (opts.height) {
            scroller.style.height = opts.height;
        }
        scroller.addEventListener('scroll', () => this.draw(scroller));
        new ResizeObserver(() => this.draw(scroller)).observe(scroller);
        this.element = h('div', { class: 'vt', role: 'table', 'aria-label': opts.label }, this.header, scroller);
        this.onSelect = opts.onSelect;
        this.scroller = scroller;
        this.drawHeader();
        this.sort();
    }

    private readonly onSelect?: (row: R) => void;
    private readonly scroller: HTMLElement;

    setFilter(predicate: ((row: R) => boolean) | undefined): void {
        this.view = predicate ? this.rows.filter(predicate) : this.rows;
        this.sort();
    }

    get visibleCount(): number {
        return this.view.length;
    }

    private drawHeader(): void {
        this.header.replaceChildren(...this.columns.map((c, i) => {
            const arrow = i === this.sortColumn ? (this.descending ? ' ▼' : ' ▲') : '';
            const cell = h('div', { class: `vt-cell${c.numeric ? ' num' : ''}`, role: 'columnheader', title: c.tooltip ?? `Sort by ${c.title}`, tabindex: 0,
                onclick: () => this.sortBy(i), onkeydown: (e) => { if ((e as KeyboardEvent).key === 'Enter') { this.sortBy(i); } } }, c.title + arrow);
            if (c.width) {
                cell.style.flex = `0 0 ${c.width}`;
            }
            return cell;
        }));
    }

    private sortBy(i: number): void {
        this.descending = i === this.sortColumn ? !this.descending : !!this.columns[i].numeric;  // numbers: largest first
        this.sortColumn = i;
        this.drawHeader();
        this.sort();
    }

    private sort(): void {
        const c = this.columns[this.sortColumn];
        const sign = this.descending ? -1 : 1;
        const keyed = this.view.map((r) => [c.value(r), r] as const);
        keyed.sort((a, b) => (a[0] < b[0] ? -sign : a[0] > b[0] ? sign : 0));
        this.view = keyed.map((k) => k[1]);
        this.spacer.style.height = `${this.view.length * this.rowHeight}px`;
        this.draw(this.scroller);
    }

    private draw(scroller: HTMLElement): void {
        const first = Math.max(0, Math.floor(scroller.scrollTop / this.rowHeight) - 5);
        const count = Math.ceil((scroller.clientHeight || 600) / this.rowHeight) + 10;
        const rows = this.view.slice(first, first + count);
        this.body.style.transform = `translateY(${first * this.rowHeight}px)`;
        this.body.replaceChildren(...rows.map((r) => {
            const row = h('div', { class: `vt-row${r === this.selected ? ' selected' : ''}`, role: 'row', onclick: () => this.select(r) },
                ...this.columns.map((c) => {
                    const cell = h('div', { class: `vt-cell${c.numeric ? ' num' : ''}`, role: 'cell' }, c.cell(r));
                    if (c.width) {
                        cell.style.flex = `0 0 ${c.width}`;
                    }
                    return cell;
                }));
            row.style.height = `${this.rowHeight}px`;
            return row;
        }));
    }

    select(row: R): void {
        this.selected = row;
        this.draw(this.scroller);
        this.onSelect?.(row);
    }
}
