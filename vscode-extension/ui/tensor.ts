// The tensor page: one tensor of the paused frame, its statistics, a histogram of its values and,
// for two or more dims, a heatmap of its first 2-D slice. The debuggee computed all of it.
import type { HostMessage } from '../src/webview/messages';
import type { Heatmap, Histogram } from '../src/debug/inspectorModel';
import { fmtBytes, fmtCount, h, replace, send, start } from './_common';

start((m) => {
    if (m.type === 'tensor') {
        render(m);
    }
});

function num(v: unknown): string {
    if (typeof v === 'number') {
        return Math.abs(v) >= 1e5 || (Math.abs(v) < 1e-3 && v !== 0) ? v.toExponential(4) : String(Number(v.toPrecision(6)));
    }
    return v === null || v === undefined ? '' : String(v);
}

function render(m: Extract<HostMessage, { type: 'tensor' }>): void {
    const d = m.detail;
    const s = d.summary;
    const rows: [string, string][] = [
        ['shape', Array.isArray(s.shape) ? `[${(s.shape as unknown[]).join(', ')}]` : ''],
        ['dtype', String(s.dtype ?? '')], ['device', String(s.device ?? '')],
        ['elements', typeof s.numel === 'number' ? fmtCount(s.numel) : ''], ['size', typeof s.nbytes === 'number' ? fmtBytes(s.nbytes) : ''],
        ['min', num(s.min)], ['max', num(s.max)], ['mean', num(s.mean)], ['std', num(s.std)],
        ['NaN', num(s.nan)], ['+Inf', num(s.pos_inf)], ['-Inf', num(s.neg_inf)],
        ['requires_grad', String(s.requires_grad ?? '')], ['grad_fn', String(s.grad_fn ?? '')],
        ['sampled', s.sampled ? `yes (${fmtCount(Number(s.stats_count))} elements)` : 'no'],
    ];
    replace(
        h('header', {}, h('h1', {}, m.name), h('span', { class: 'muted' }, m.expr === m.name ? m.frame : `${m.expr} · ${m.frame}`),
            h('button', { class: 'secondary', onclick: () => send({ type: 'refreshTensor' }) }, 'Refresh')),
        h('p', {}, h('code', { class: 'summary-line' }, d.line)),
        h('div', { class: 'columns' },
            h('div', {}, h('h2', {}, 'Histogram'), histogram(d.histogram)),
            h('div', {}, h('h2', {}, 'Heatmap'), heatmap(d.heatmap))),
        h('h2', {}, 'Statistics'),
        h('table', { class: 'facts' }, h('tbody', {}, ...rows.filter(([, v]) => v !== '' && v !== 'null').map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', {}, v))))),
    );
}

function histogram(hist: Histogram | null): HTMLElement {
    if (!hist || !hist.counts.length) {
        return h('p', { class: 'muted' }, hist ? `No finite values (${fmtCount(hist.nonfinite)} NaN/Inf).` : 'No values to count for this tensor.');
    }
    const W = 360, H = 140;
    const canvas = h('canvas', { class: 'histogram', width: W, height: H, role: 'img', 'aria-label': 'Histogram of values' });
    const ctx = canvas.getContext('2d')!;
    const max = Math.max(...hist.counts, 1);
    const bw = W / hist.counts.length;
    ctx.fillStyle = getComputedStyle(document.body).getPropertyValue('--vscode-charts-blue') || '#3794ff';
    hist.counts.forEach((c, i) => {
        const bh = (c / max) * (H - 4);
        ctx.fillRect(i * bw + 0.5, H - bh, Math.max(1, bw - 1), bh);
    });
    const lo = hist.edges[0], hi = hist.edges[hist.edges.length - 1];
    return h('div', {},
        canvas,
        h('div', { class: 'axis-labels' }, h('span', {}, num(hist.integer ? lo + 0.5 : lo)), h('span', {}, num(hist.integer ? hi - 0.5 : hi))),
        h('p', { class: 'muted caption' }, `${fmtCount(hist.total)} finite values${hist.nonfinite ? `, ${fmtCount(hist.nonfinite)} NaN/Inf left out` : ''}${hist.sampled ? ' (an evenly spread sample)' : ''}; tallest bin ${fmtCount(max)}.`));
}

function heatmap(map: Heatmap | null): HTMLElement {
    if (!map) {
        return h('p', { class: 'muted' }, 'Heatmaps are drawn for tensors with two or more dimensions.');
    }
    const cell = Math.max(2, Math.min(12, Math.floor(320 / Math.max(map.rows, map.cols))));
    const canvas = h('canvas', { class: 'heatmap', width: map.cols * cell, height: map.rows * cell, role: 'img', 'aria-label': 'Heatmap of values' });
    const ctx = canvas.getContext('2d')!;
    const lo = map.min ?? 0, hi = map.max ?? 1;
    for (let r = 0; r < map.rows; r++) {
        for (let c = 0; c < map.cols; c++) {
            const v = map.cells[r * map.cols + c];
            ctx.fillStyle = v === null ? '#ff00ff' : viridis((v - lo) / Math.max(1e-30, hi - lo));
            ctx.fillRect(c * cell, r * cell, cell, cell);
        }
    }
    const shape = `[${map.sourceShape.join(', ')}]`;
    return h('div', {},
        canvas,
        h('p', { class: 'muted caption' }, `${map.slice ? `slice ${map.slice} of ` : ''}${shape} as ${map.rows}×${map.cols} cells (each the mean of its block${map.sampled ? ', from a strided sample' : ''}); colour from ${num(lo)} to ${num(hi)}; magenta: NaN/Inf.`));
}

function viridis(t: number): string {
    const x = Math.max(0, Math.min(1, Number.isFinite(t) ? t : 0));
    // A few stops of matplotlib's viridis, linearly interpolated.
    const stops = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
    const p = x * (stops.length - 1);
    const i = Math.min(stops.length - 2, Math.floor(p));
    const f = p - i;
    const c = stops[i].map((a, k) => Math.round(a + (stops[i + 1][k] - a) * f));
    return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}
