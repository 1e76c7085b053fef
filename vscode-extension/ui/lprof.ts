// The .lprof page: one table per profiled function, line by line (hits, time, time per hit,
// share of the function) beside the source text, hottest functions first.
import type { HostMessage, LprofView } from '../src/webview/messages';
import { baseName, fmtCount, fmtPercent, fmtSeconds, h, replace, send, sourceLink, start } from './_common';

start((m) => {
    if (m.type === 'lprof') {
        render(m);
    }
});

function render(m: Extract<HostMessage, { type: 'lprof' }>): void {
    const functions = [...m.functions].sort((a, b) => b.total - a.total);
    const all = functions.reduce((s, f) => s + f.total, 0);
    replace(
        h('header', {}, h('h1', {}, m.fileName),
            h('span', { class: 'muted' }, `${functions.length} function${functions.length === 1 ? '' : 's'} · ${fmtSeconds(all)} · timer unit ${m.unit} s`)),
        h('p', { class: 'muted' }, m.decorations
            ? 'Per-line times are shown in the source editor too; "tensor_dap: Toggle Line Profile Decorations" hides them.'
            : 'Use "Show in source" to see per-line times in the editor.'),
        ...(functions.length ? functions.map(fnTable) : [h('p', {}, 'This line profile holds no functions (was any function decorated with @profile?).')]),
    );
}

function fnTable(f: LprofView): HTMLElement {
    const byLine = new Map(f.lines.map(([line, hits, time]) => [line, { hits, time }]));
    const first = f.sourceFirst;
    const last = f.lines.length ? Math.max(f.line, f.lines[f.lines.length - 1][0]) : f.line;
    const rows: HTMLElement[] = [];
    for (let line = first; line <= last; line++) {
        const stats = byLine.get(line);
        const text = f.source ? f.source[line - first] ?? '' : '';
        if (!stats && !f.source) {
            continue;
        }
        const share = stats && f.total > 0 ? stats.time / f.total : 0;
        const bar = h('span', { class: 'bar' });
        bar.style.width = `${Math.round(share * 100)}%`;
        rows.push(h('tr', { class: stats ? 'hit' : 'quiet' },
            h('td', { class: 'num' }, h('a', { href: '#', onclick: (e) => { e.preventDefault(); send({ type: 'openSource', file: f.file, line }); } }, String(line))),
            h('td', { class: 'num' }, stats ? fmtCount(stats.hits) : ''),
            h('td', { class: 'num' }, stats ? fmtSeconds(stats.time) : ''),
            h('td', { class: 'num' }, stats && stats.hits ? fmtSeconds(stats.time / stats.hits) : ''),
            h('td', { class: 'num' }, stats ? fmtPercent(stats.time, f.total) : ''),
            h('td', { class: 'heat' }, bar),
            h('td', { class: 'code' }, h('code', {}, text))));
    }
    return h('section', { class: 'function' },
        h('h2', {}, f.name, ' ', sourceLink(f.file, f.line),
            h('span', { class: 'muted' }, ` ${fmtSeconds(f.total)}`),
            h('button', { class: 'secondary', onclick: () => send({ type: 'showLineProfile', file: f.file, line: f.line }) }, 'Show in source')),
        f.source ? null : h('p', { class: 'muted' }, `${baseName(f.file)} was not found in this workspace, so only the profiled lines are listed.`),
        h('table', { class: 'lines' },
            h('thead', {}, h('tr', {}, ...['Line', 'Hits', 'Time', 'Per hit', '% of function', '', 'Code'].map((c, i) => h('th', { class: i < 5 ? 'num' : '' }, c)))),
            h('tbody', {}, ...rows)));
}
