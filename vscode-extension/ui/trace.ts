// The torch.profiler trace page: the summary the host streamed out of the trace (never the
// trace itself): top operators by self time, and a timeline of the longest events.
import type { HostMessage } from '../src/webview/messages';
import type { OpRow, TraceSummary } from '../src/parsers/trace';
import { Column, fmtBytes, fmtCount, fmtMicros, fmtPercent, h, replace, start, VirtualTable } from './_common';

start((m) => {
    if (m.type === 'trace') {
        render(m);
    }
});

function render(m: Extract<HostMessage, { type: 'trace' }>): void {
    const s = m.summary;
    const selfTotal = s.ops.reduce((a, o) => a + o.selfCpu, 0);
    const columns: Column<OpRow>[] = [
        { title: 'Operator', value: (o) => o.name.toLowerCase(), cell: (o) => h('span', { title: o.name }, o.name) },
        { title: 'Calls', numeric: true, width: '8%', value: (o) => o.calls, cell: (o) => fmtCount(o.calls) },
        { title: 'Self CPU', numeric: true, width: '10%', value: (o) => o.selfCpu, cell: (o) => fmtMicros(o.selfCpu) },
        { title: 'Self CPU %', numeric: true, width: '9%', value: (o) => o.selfCpu, cell: (o) => fmtPercent(o.selfCpu, selfTotal) },
        { title: 'CPU total', numeric: true, width: '10%', value: (o) => o.totalCpu, cell: (o) => fmtMicros(o.totalCpu) },
        ...(s.hasCuda ? [{ title: 'Self CUDA', numeric: true, width: '10%', value: (o: OpRow) => o.selfCuda, cell: (o: OpRow) => fmtMicros(o.selfCuda) }] : []),
        { title: 'Input shapes (most common)', width: '30%', value: (o) => o.shapes[0]?.[0] ?? '', cell: (o) => h('span', { class: 'shapes', title: o.shapes.map(([sh, n]) => `${sh} ×${n}`).join('\n') }, o.shapes.map(([sh, n]) => `${sh} ×${n}`).join('  ')) },
    ];
    const sortBy = s.hasCuda ? 5 : 2;
    const vt = new VirtualTable(columns, s.ops, { sortBy, label: 'operators', height: '45vh' });
    replace(
        h('header', {}, h('h1', {}, m.fileName),
            h('span', { class: 'muted' }, `${fmtBytes(m.bytes)} · ${fmtCount(s.events)} events · ${fmtMicros(s.spanUs)} traced${s.steps ? ` · ${s.steps} profiler steps` : ''} · summarized in ${(m.loadMs / 1000).toFixed(2)} s`)),
        deviceLine(s),
        h('h2', {}, `Top operators${s.opsTotal > s.ops.length ? ` (${s.ops.length} of ${s.opsTotal})` : ''}`),
        s.ops.length ? vt.element : h('p', { class: 'muted' }, 'No operator events (cpu_op) in this trace.'),
        h('h2', {}, 'Timeline'),
        timeline(s),
        h('h2', {}, 'Time by category'),
        h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'Category'), h('th', { class: 'num' }, 'Events'), h('th', { class: 'num' }, 'Time'))),
            h('tbody', {}, ...s.categories.map(([c, n, t]) => h('tr', {}, h('td', {}, c), h('td', { class: 'num' }, fmtCount(n)), h('td', { class: 'num' }, fmtMicros(t)))))),
    );
}

function deviceLine(s: TraceSummary): HTMLElement | null {
    const devices = (s.metadata.deviceProperties ?? []) as { name?: unknown }[];
    const names = devices.map((d) => (typeof d?.name === 'string' ? d.name : '')).filter(Boolean);
    return names.length ? h('p', {}, `Devices: ${names.join(', ')}`) : h('p', { class: 'muted' }, s.hasCuda ? '' : 'CPU only: no CUDA kernels in this trace.');
}

function timeline(s: TraceSummary): HTMLElement {
    const laneRows = new Map<number, number>();
    for (const e of s.timeline) {
        laneRows.set(e.lane, Math.max(laneRows.get(e.lane) ?? 0, e.depth + 1));
    }
    const lanes = [...laneRows.keys()].sort((a, b) => a - b);
    const rowH = 14, gap = 18;
    let y = 0;
    const laneY = new Map<number, number>();
    for (const l of lanes) {
        laneY.set(l, y + gap);
        y += gap + Math.min(laneRows.get(l)!, 12) * rowH;
    }
    const canvas = h('canvas', { class: 'timeline', role: 'img', 'aria-label': 'Timeline of the longest events' });
    const tip = h('div', { class: 'tooltip', hidden: true });
    const wrap = h('div', { class: 'timeline-wrap' },
        h('p', { class: 'muted' }, `The ${fmtCount(s.timeline.length)} longest events${s.timelineDropped ? ` (${fmtCount(s.timelineDropped)} shorter ones left out)` : ''}, one band per thread or stream.`),
        canvas, tip);
    const span = s.spanUs || 1;
    const draw = () => {
        const width = wrap.clientWidth || 800;
        const ratio = window.devicePixelRatio || 1;
        canvas.width = width * ratio;
        canvas.height = Math.max(1, y) * ratio;
        canvas.style.width = `${width}px`;
        canvas.style.height = `${y}px`;
        const ctx = canvas.getContext('2d')!;
        ctx.scale(ratio, ratio);
        ctx.font = '11px sans-serif';
        const fg = getComputedStyle(document.body).getPropertyValue('--vscode-foreground') || '#888';
        for (const l of lanes) {
            ctx.fillStyle = fg;
            ctx.fillText(s.lanes[l] ?? `lane ${l}`, 2, laneY.get(l)! - 4);
        }
        for (const e of s.timeline) {
            if (e.depth >= 12) {
                continue;
            }
            const x = (e.start / span) * width;
            const w = Math.max(1, (e.dur / span) * width);
            ctx.fillStyle = catColour(e.cat);
            ctx.fillRect(x, laneY.get(e.lane)! + e.depth * rowH, w, rowH - 1);
        }
    };
    canvas.addEventListener('mousemove', (ev) => {
        const width = canvas.clientWidth;
        const t = (ev.offsetX / width) * span;
        const hitEvent = s.timeline.find((e) => {
            const top = laneY.get(e.lane)! + e.depth * rowH;
            return ev.offsetY >= top && ev.offsetY < top + rowH && t >= e.start && t <= e.start + Math.max(e.dur, span / width);
        });
        tip.hidden = !hitEvent;
        if (hitEvent) {
            tip.textContent = `${hitEvent.name} (${hitEvent.cat || 'event'}) — ${fmtMicros(hitEvent.dur)}`;
            tip.style.left = `${ev.offsetX + 12}px`;
            tip.style.top = `${ev.offsetY + 30}px`;
        }
    });
    canvas.addEventListener('mouseleave', () => { tip.hidden = true; });
    new ResizeObserver(draw).observe(wrap);
    return wrap;
}

function catColour(cat: string): string {
    switch (cat) {
        case 'kernel': case 'Kernel': return 'hsl(130, 55%, 50%)';
        case 'gpu_memcpy': case 'gpu_memset': case 'Memcpy': case 'Memset': return 'hsl(50, 80%, 55%)';
        case 'cuda_runtime': case 'cuda_driver': return 'hsl(280, 40%, 65%)';
        case 'user_annotation': case 'gpu_user_annotation': return 'hsl(0, 60%, 65%)';
        case 'python_function': return 'hsl(200, 30%, 65%)';
        case 'Trace': return 'hsl(0, 0%, 60%)';
        default: return 'hsl(210, 70%, 60%)';
    }
}
