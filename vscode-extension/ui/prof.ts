// The .prof page: a sortable, filterable table of every function, an icicle of the call tree,
// and the callers and callees of the selected function. Clicking a location opens the source.
import type { ImportSplit } from '../src/parsers/importSplit';
import type { HostMessage } from '../src/webview/messages';
import type { IcicleNode, ProfTable, Relative } from '../src/views/profView';
import { baseName, Column, fmtCount, fmtPercent, fmtSeconds, h, replace, send, sourceLink, start, VirtualTable } from './_common';

type ProfMessage = Extract<HostMessage, { type: 'prof' }>;

let table: ProfTable;
let details: HTMLElement;
let selectedId = -1;

let drawIcicle: ((nodes: IcicleNode[]) => void) | undefined;
let showImports: ((split: ImportSplit) => void) | undefined;

start((m) => {
    if (m.type === 'prof') {
        render(m);
    } else if (m.type === 'relatives' && m.id === selectedId) {
        drawRelatives(m.id, m.callers, m.callees);
    } else if (m.type === 'icicle') {
        drawIcicle?.(m.nodes);
    } else if (m.type === 'imports' && m.split) {
        showImports?.(m.split);
    }
});

/** Below this share of the profile, imports are not worth a word. */
const IMPORTS_WORTH_SAYING = 0.05;

function render(m: ProfMessage): void {
    table = m.table;
    const t = table;
    const ids = Array.from({ length: t.name.length }, (_, i) => i);
    // The columns read the times through these: with imports left out, tensor_dap's estimate of each
    // function's time outside them (``import_json``), and the functions that are all import hidden.
    let own = t.own, cumulative = t.cumulative, total = t.totalTime;
    let hidden: ((i: number) => boolean) | undefined;
    let query: ((i: number) => boolean) | undefined;
    const columns: Column<number>[] = [
        { title: 'Function', value: (i) => t.name[i].toLowerCase(), cell: (i) => h('span', { title: t.name[i] }, t.name[i]) },
        { title: 'Location', width: '18%', value: (i) => `${baseName(t.files[t.file[i]])}:${String(t.line[i]).padStart(7, '0')}`, cell: (i) => sourceLink(t.files[t.file[i]], t.line[i]) },
        { title: 'Calls', numeric: true, width: '7%', value: (i) => t.calls[i], cell: (i) => (t.calls[i] === t.primitive[i] ? fmtCount(t.calls[i]) : `${fmtCount(t.calls[i])}/${fmtCount(t.primitive[i])}`), tooltip: 'calls (total/primitive when recursive)' },
        { title: 'Own', numeric: true, width: '8%', value: (i) => own[i], cell: (i) => fmtSeconds(own[i]), tooltip: 'time in the function itself (tottime)' },
        { title: 'Own %', numeric: true, width: '6%', value: (i) => own[i], cell: (i) => fmtPercent(own[i], total) },
        { title: 'Cumulative', numeric: true, width: '9%', value: (i) => cumulative[i], cell: (i) => fmtSeconds(cumulative[i]), tooltip: 'time including everything it called (cumtime)' },
        { title: 'Own/call', numeric: true, width: '8%', value: (i) => own[i] / Math.max(1, t.calls[i]), cell: (i) => fmtSeconds(own[i] / Math.max(1, t.calls[i])) },
        { title: 'Cum/call', numeric: true, width: '8%', value: (i) => cumulative[i] / Math.max(1, t.primitive[i]), cell: (i) => fmtSeconds(cumulative[i] / Math.max(1, t.primitive[i])) },
    ];
    const vt = new VirtualTable(columns, ids, { sortBy: 5, onSelect: select, label: 'functions', height: '55vh' });
    const count = h('span', { class: 'muted' }, `${fmtCount(ids.length)} functions`);
    const summary = h('span', { class: 'muted' }, '');
    const refresh = () => {
        const hide = hidden, match = query;
        vt.setFilter(hide || match ? (i) => !hide?.(i) && (!match || match(i)) : undefined);
        const shown = hide ? ids.filter((i) => !hide(i)).length : ids.length;
        count.textContent = match ? `${fmtCount(vt.visibleCount)} of ${fmtCount(shown)} functions` : `${fmtCount(shown)} functions`;
        summary.textContent = `${fmtSeconds(total)} total · ${fmtCount(shown)} functions · read in ${m.loadMs.toFixed(0)} ms`;
    };
    const filter = h('input', { type: 'search', placeholder: 'Filter by function or file', 'aria-label': 'Filter functions', class: 'filter' });
    filter.addEventListener('input', () => {
        const q = filter.value.trim().toLowerCase();
        query = q ? (i) => t.name[i].toLowerCase().includes(q) || t.files[t.file[i]].toLowerCase().includes(q) : undefined;
        refresh();
    });
    refresh();
    const importsNote = h('p', { class: 'imports', hidden: true });
    let icicle: HTMLElement = h('div', { class: 'pane icicle-wrap' }, h('p', { class: 'muted loading' }, 'Building the call tree…'));
    let asked = false;
    let withoutImports = false;
    const askIcicle = () => {
        asked = true;
        send({ type: 'icicle', withoutImports });
    };
    drawIcicle = (nodes) => {
        const view = icicleView(nodes, nodes.filter((n) => n.depth === 0).reduce((sum, n) => sum + n.time, 0), withoutImports);
        view.hidden = icicle.hidden;
        icicle.replaceWith(view);
        icicle = view;
    };
    showImports = (split) => {
        if (!(split.importing > IMPORTS_WORTH_SAYING * split.profiled)) {
            return;
        }
        const ownWithout = split.own.reduce((s, v) => s + Math.max(v, 0), 0);
        const toggle = h('button', { class: 'secondary' });
        const show = (leftOut: boolean) => {
            own = leftOut ? split.own : t.own;
            cumulative = leftOut ? split.cumulative : t.cumulative;
            total = leftOut ? ownWithout : t.totalTime;
            hidden = leftOut ? (i) => split.cumulative[i] < 0 : undefined;
            toggle.textContent = leftOut ? 'Show imports' : 'Leave out imports';
            toggle.onclick = () => show(!leftOut);
            importsNote.firstChild!.textContent = leftOut
                ? `Imports took ${fmtSeconds(split.importing)} of the ${fmtSeconds(split.profiled)} profiled: left out of the table and the call tree (an estimate from cProfile's caller totals). `
                : `Imports took ${fmtSeconds(split.importing)} of the ${fmtSeconds(split.profiled)} profiled: shown, as the file has them. `;
            refresh();
            withoutImports = leftOut;
            if (asked) {
                askIcicle();  // (drawn again when it comes)
            }
        };
        importsNote.replaceChildren(h('span', {}, ''), toggle);
        importsNote.hidden = false;
        show(true);
    };
    const tablePane = h('div', { class: 'pane' }, h('div', { class: 'toolbar' }, filter, count), vt.element);
    const tabs = tabBar(['Functions', 'Call tree'], (k) => {
        if (k === 1 && !asked) {
            askIcicle();
        }
    });
    details = h('section', { class: 'details' }, h('p', { class: 'muted' }, 'Select a function to see its callers and callees.'));
    replace(
        h('header', {}, h('h1', {}, m.fileName), summary),
        importsNote, tabs, tablePane, icicle, details);
    send({ type: 'imports' });
}

/** Tabs over the page's `.pane` children, in order; `shown(k)` runs each time tab k is shown. */
function tabBar(labels: string[], shown: (k: number) => void): HTMLElement {
    const buttons = labels.map((label, k) => h('button', { role: 'tab', class: 'tab', onclick: () => show(k) }, label));
    const show = (k: number) => {
        buttons.forEach((b, j) => {
            b.classList.toggle('active', j === k);
            b.setAttribute('aria-selected', String(j === k));
        });
        // Looked up each time: the icicle pane is replaced when its nodes arrive.
        [...document.querySelectorAll<HTMLElement>('#app > .pane')].forEach((pane, j) => { pane.hidden = j !== k; });
        shown(k);
    };
    queueMicrotask(() => show(0));
    return h('nav', { class: 'tabs', role: 'tablist' }, ...buttons);
}

function select(id: number): void {
    selectedId = id;
    details.replaceChildren(h('p', { class: 'muted' }, 'Reading callers and callees…'));
    send({ type: 'relatives', id });
}

function drawRelatives(id: number, callers: Relative[], callees: Relative[]): void {
    const t = table;
    const list = (title: string, rows: Relative[], what: string) => h('div', { class: 'relatives' },
        h('h3', {}, `${title} (${rows.length})`),
        rows.length ? h('table', {},
            h('thead', {}, h('tr', {}, h('th', {}, 'Function'), h('th', {}, 'Location'), h('th', { class: 'num' }, 'Calls'), h('th', { class: 'num' }, what))),
            h('tbody', {}, ...rows.slice(0, 200).map((r) => h('tr', {},
                h('td', {}, h('a', { href: '#', title: t.name[r.id], onclick: (e) => { e.preventDefault(); select(r.id); } }, t.name[r.id])),
                h('td', {}, sourceLink(t.files[t.file[r.id]], t.line[r.id])),
                h('td', { class: 'num' }, fmtCount(r.calls)),
                h('td', { class: 'num' }, fmtSeconds(r.cumulative)))))) : h('p', { class: 'muted' }, 'none'));
    details.replaceChildren(
        h('h2', {}, t.name[id], ' ', sourceLink(t.files[t.file[id]], t.line[id])),
        h('div', { class: 'columns' },
            list('Called by', callers, 'Time for caller'),
            list('Calls', callees, 'Time')));
}

function icicleView(nodes: IcicleNode[], total: number, withoutImports: boolean): HTMLElement {
    const t = () => table;
    const rowH = 20;
    const depth = nodes.reduce((d, n) => Math.max(d, n.depth), 0) + 1;
    const canvas = h('canvas', { class: 'icicle', role: 'img', 'aria-label': 'Icicle chart of the call tree' });
    const tip = h('div', { class: 'tooltip', hidden: true });
    const wrap = h('div', { class: 'pane icicle-wrap' },
        h('p', { class: 'muted' }, `Call tree from the root down; width is time (${fmtSeconds(total)} in all${withoutImports ? ', imports left out' : ''}). Click: callers and callees below. Double-click: open the source.`),
        canvas, tip);
    const hit = (e: MouseEvent) => {
        const rect = canvas.getBoundingClientRect();
        const x = (e.clientX - rect.left) / rect.width;
        const d = Math.floor((e.clientY - rect.top) / rowH);
        return nodes.find((n) => n.depth === d && x >= n.x && x <= n.x + n.w);
    };
    const draw = () => {
        const width = wrap.clientWidth || 800;
        const ratio = window.devicePixelRatio || 1;
        canvas.width = width * ratio;
        canvas.height = depth * rowH * ratio;
        canvas.style.width = `${width}px`;
        canvas.style.height = `${depth * rowH}px`;
        const ctx = canvas.getContext('2d')!;
        ctx.scale(ratio, ratio);
        const style = getComputedStyle(document.body);
        ctx.font = `12px ${style.getPropertyValue('--vscode-editor-font-family') || 'monospace'}`;
        for (const n of nodes) {
            const x = n.x * width, w = n.w * width, y = n.depth * rowH;
            if (w < 0.5) {
                continue;
            }
            ctx.fillStyle = colour(t().files[t().file[n.id]]);
            ctx.fillRect(x, y, Math.max(1, w - 1), rowH - 1);
            if (w > 30) {
                ctx.fillStyle = '#111';
                ctx.fillText(fit(ctx, t().name[n.id], w - 6), x + 3, y + 14);
            }
        }
    };
    canvas.addEventListener('mousemove', (e) => {
        const n = hit(e);
        tip.hidden = !n;
        if (n) {
            tip.textContent = `${t().name[n.id]} — ${fmtSeconds(n.time)} (${fmtPercent(n.time, total)}) — ${t().files[t().file[n.id]]}:${t().line[n.id]}`;
            tip.style.left = `${e.offsetX + 12}px`;
            tip.style.top = `${e.offsetY + 40}px`;
        }
    });
    canvas.addEventListener('mouseleave', () => { tip.hidden = true; });
    canvas.addEventListener('click', (e) => { const n = hit(e); if (n) { select(n.id); } });
    canvas.addEventListener('dblclick', (e) => { const n = hit(e); if (n) { send({ type: 'openSource', file: t().files[t().file[n.id]], line: t().line[n.id] }); } });
    new ResizeObserver(draw).observe(wrap);
    return wrap;
}

function fit(ctx: CanvasRenderingContext2D, text: string, width: number): string {
    if (ctx.measureText(text).width <= width) {
        return text;
    }
    let lo = 0, hi = text.length;
    while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (ctx.measureText(text.slice(0, mid) + '…').width <= width) { lo = mid; } else { hi = mid - 1; }
    }
    return lo ? text.slice(0, lo) + '…' : '';
}

function colour(file: string): string {
    let hash = 0;
    for (let i = 0; i < file.length; i++) {
        hash = (hash * 31 + file.charCodeAt(i)) | 0;
    }
    const builtin = file === '~' || file.startsWith('<');
    return builtin ? 'hsl(210, 15%, 70%)' : `hsl(${Math.abs(hash) % 50 + 10}, 75%, ${62 + (Math.abs(hash >> 8) % 16)}%)`;
}
