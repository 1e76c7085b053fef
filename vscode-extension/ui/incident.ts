// The incident page: what fired, where (step, module, phase, op, the user's source line), the
// loss history, the tensors the trigger summarized, and a button that replays the bundle in
// the debugger.
import type { HostMessage } from '../src/webview/messages';
import type { IncidentReport } from '../src/parsers/incident';
import { h, replace, send, sourceLink, start } from './_common';

start((m) => {
    if (m.type === 'incident') {
        render(m);
    }
});

function num(x: number | undefined): string {
    if (x === undefined) { return ''; }
    if (Number.isNaN(x)) { return 'NaN'; }
    if (!Number.isFinite(x)) { return x > 0 ? '+Inf' : '-Inf'; }
    return Math.abs(x) >= 1e4 || (Math.abs(x) < 1e-3 && x !== 0) ? x.toExponential(3) : String(Number(x.toPrecision(5)));
}

function render(m: Extract<HostMessage, { type: 'incident' }>): void {
    const r = m.report;
    const whereText = [r.phase, r.module !== undefined ? `${r.phase ? 'of ' : ''}${r.module || 'the model itself'}${r.moduleType ? ` (${r.moduleType})` : ''}` : ''].filter(Boolean).join(' ');
    const facts: [string, Node | string][] = [];
    const add = (k: string, v: Node | string | undefined) => { if (v !== undefined && v !== '') { facts.push([k, v]); } };
    add('Step', r.step !== undefined ? String(r.step) : undefined);
    add('Where', whereText);
    add('Operation', r.op ? `${r.op}${r.forwardOp ? ` (backward of ${r.forwardOp})` : ''}` : undefined);
    add('Loss', r.loss !== undefined ? num(r.loss) : undefined);
    add('Learning rate', r.lr && (r.lr.length > 1 && r.lr.every((v) => v === r.lr![0]) ? `${num(r.lr[0])} (all ${r.lr.length} parameter groups)` : r.lr.map(num).join(', ')));
    add('Largest magnitude', r.maxAbs !== undefined ? num(r.maxAbs) : undefined);
    add('Rank', r.rank !== undefined ? String(r.rank) : undefined);
    add('Replays', r.mode === 'loop' ? 'the model\'s forwards (loop)' : r.mode === 'step' ? 'with the step function' : undefined);
    add('Kind', r.kind);
    add('When', r.created !== undefined ? new Date(r.created * 1000).toLocaleString() : undefined);
    add('Bundle', m.bundle);
    replace(
        h('header', {}, h('h1', { class: 'alarm' }, r.headline || r.kind),
            h('button', { class: 'primary', onclick: () => send({ type: 'replay' }), title: 'Run your training script under the debugger with this bundle: it stops where the value went non-finite' }, 'Replay in Debugger')),
        h('table', { class: 'facts' }, h('tbody', {}, ...facts.map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', {}, v))))),
        // (as the Python report's origin: a loss op, or a batch's first use with no module, read from the loss's graph)
        r.source ? h('section', {}, h('h2', {}, r.source.near && r.op
            ? (r.source.near === 'after' ? "Source: the model's call (the op is in the loss computed after it)"
                : 'Source: the backward() call (the op is in the loss computed before it)') : 'Source'),
            h('p', {}, sourceLink(r.source.file, r.source.line, `${r.source.file}:${r.source.line}`)),
            r.source.text ? h('pre', { class: 'code' }, r.source.text) : null) : null,
        r.diagnosis.length ? h('section', {}, h('h2', {}, 'Diagnosis'), h('ul', {}, ...r.diagnosis.map((d) => h('li', {}, d)))) : null,
        r.notes.length ? h('section', {}, h('h2', {}, 'Notes'), h('ul', {}, ...r.notes.map((d) => h('li', {}, d)))) : null,
        h('section', {}, h('h2', {}, 'Loss history'), lossChart(r)),
        r.tensors.length ? h('section', {}, h('h2', {}, 'Tensors'), tensors(r)) : null,
    );
}

function tensors(r: IncidentReport): HTMLElement {
    const rows: HTMLElement[] = [];
    let section = '';
    for (const t of r.tensors) {
        if (t.section !== section) {
            section = t.section;
            rows.push(h('tr', { class: 'section' }, h('th', { colspan: 2 }, section)));
        }
        rows.push(h('tr', { class: t.nonfinite ? 'nonfinite' : '' }, h('td', {}, t.name), h('td', {}, h('code', {}, t.line))));
    }
    return h('table', { class: 'tensors' }, h('tbody', {}, ...rows));
}

function lossChart(r: IncidentReport): HTMLElement {
    const points = r.lossHistory;
    if (!points.length) {
        return h('p', { class: 'muted' }, (r.version ?? 1) >= 2
            ? 'No loss was seen before this fired (the value went non-finite inside the first forward, or the step returns no loss).'
            : 'This report has no loss history (tensor_dap records it since report version 2).');
    }
    const W = 560, H = 160, pad = 34;
    const finite = points.filter(([, l]) => Number.isFinite(l));
    const lo = finite.length ? Math.min(...finite.map(([, l]) => l)) : 0;
    const hi = finite.length ? Math.max(...finite.map(([, l]) => l)) : 1;
    const s0 = points[0][0], s1 = points[points.length - 1][0];
    const sx = (s: number) => pad + ((s - s0) / Math.max(1, s1 - s0)) * (W - 2 * pad);
    const sy = (l: number) => H - pad + 10 - ((l - lo) / Math.max(1e-30, hi - lo)) * (H - 2 * pad);
    const NS = 'http://www.w3.org/2000/svg';
    const el = (tag: string, attrs: Record<string, string | number>, text?: string) => {
        const e = document.createElementNS(NS, tag);
        for (const [k, v] of Object.entries(attrs)) { e.setAttribute(k, String(v)); }
        if (text !== undefined) { e.textContent = text; }
        return e;
    };
    const svg = el('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-label': 'Loss by step' });
    svg.append(el('line', { x1: pad, y1: H - pad + 10, x2: W - pad, y2: H - pad + 10, class: 'axis' }));
    svg.append(el('text', { x: 2, y: sy(hi) + 4, class: 'label' }, num(hi)));
    svg.append(el('text', { x: 2, y: sy(lo) + 4, class: 'label' }, num(lo)));
    svg.append(el('text', { x: pad, y: H - 4, class: 'label' }, `step ${s0}`));
    svg.append(el('text', { x: W - pad - 50, y: H - 4, class: 'label' }, `step ${s1}`));
    let path = '';
    for (const [s, l] of points) {
        if (Number.isFinite(l)) {
            path += `${path ? 'L' : 'M'}${sx(s).toFixed(1)},${sy(l).toFixed(1)} `;
        } else {
            svg.append(el('line', { x1: sx(s), y1: 8, x2: sx(s), y2: H - pad + 10, class: 'bad' }));
            svg.append(el('text', { x: sx(s) + 3, y: 18, class: 'bad-label' }, `${num(l)} @ ${s}`));
        }
    }
    if (path) {
        svg.append(el('path', { d: path, class: 'loss' }));
    }
    for (const [s, l] of finite) {
        svg.append(el('circle', { cx: sx(s), cy: sy(l), r: 2.5, class: 'dot' }, undefined));
    }
    const wrap = h('div', { class: 'chart-wrap' });
    wrap.append(svg);
    return wrap;
}
