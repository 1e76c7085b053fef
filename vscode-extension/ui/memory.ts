// The memory.json page: peak memory, then the allocation sites, largest first, linked to source.
import type { HostMessage } from '../src/webview/messages';
import type { MemorySite } from '../src/parsers/memory';
import { Column, fmtBytes, fmtCount, fmtPercent, h, replace, sourceLink, start, VirtualTable } from './_common';

start((m) => {
    if (m.type === 'memory') {
        render(m);
    }
});

function render(m: Extract<HostMessage, { type: 'memory' }>): void {
    const r = m.report;
    const columns = (total: number): Column<MemorySite>[] => [
        { title: 'Site', width: '30%', value: (s) => `${s.file}:${String(s.line).padStart(7, '0')}`, cell: (s) => sourceLink(s.file, s.line) },
        { title: 'Function', value: (s) => s.op ?? s.function ?? '', cell: (s) => (s.op ? `${s.op} in ${s.function ?? '?'}${s.backward ? ' (backward)' : ''}` : s.function ?? '') },
        { title: 'Size', numeric: true, width: '12%', value: (s) => s.size, cell: (s) => fmtBytes(s.size) },
        { title: '% of listed', numeric: true, width: '11%', value: (s) => s.size, cell: (s) => fmtPercent(s.size, total) },
        { title: 'Allocations', numeric: true, width: '12%', value: (s) => s.count, cell: (s) => fmtCount(s.count) },
    ];
    const facts: string[] = [];
    if (r.peakRss !== undefined) { facts.push(`peak RSS ${fmtBytes(r.peakRss)}`); }
    if (r.cuda?.peakAllocated !== undefined) { facts.push(`CUDA${r.cuda.device ? ` ${r.cuda.device}` : ''} peak allocated ${fmtBytes(r.cuda.peakAllocated)}`); }
    if (r.cuda?.peakReserved !== undefined) { facts.push(`peak reserved ${fmtBytes(r.cuda.peakReserved)}`); }
    replace(
        h('header', {}, h('h1', {}, m.fileName), h('span', { class: 'muted' }, facts.join(' · ') || 'no peak figures in this report')),
        r.program ? h('p', { class: 'muted' }, `program: ${r.program}`) : null,
        h('h2', {}, `Top allocation sites${r.measure ? ` (${r.measure})` : ''}: ${fmtCount(r.sites.length)}, ${fmtBytes(r.totalSize)}`),
        r.skipped ? h('p', { class: 'muted' }, `${r.skipped} entries were not allocation sites and are left out.`) : null,
        r.sites.length ? new VirtualTable(columns(r.totalSize), r.sites, { sortBy: 2, label: 'allocation sites', height: r.torch ? '40vh' : '70vh' }).element : h('p', {}, 'No allocation sites in this report.'),
        r.torch ? h('h2', {}, `torch operators on the CPU${r.torch.measure ? ` (${r.torch.measure})` : ''}`) : null,
        r.torch && r.torch.sites.length ? new VirtualTable(columns(r.torch.sites.reduce((a, s) => a + s.size, 0)), r.torch.sites, { sortBy: 2, label: 'torch allocation sites', height: '30vh' }).element : null,
    );
}
