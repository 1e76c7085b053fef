/**
 * tensor_dap memory reports (`memory.json`, written by `tensor-dap profile --mode memory`), read
 * tolerantly: the writer may add fields or spell a few differently, and a bad entry is skipped and
 * counted rather than failing the view. The accepted schema is documented in the extension's
 * README ("File formats").
 */
import { FileFormatError } from './errors';

export interface MemorySite {
    file: string;
    line: number;
    function?: string;
    op?: string;    // the torch operator that allocated, for torch.profiler sites
    backward?: boolean; // allocated by autograd for what `function`'s forward made (torch.profiler sites)
    size: number;   // bytes allocated at this site (still live at the peak, or in total: see `measure`)
    count: number;  // allocations
}

/** A second list some reports carry: bytes torch operators allocated on the CPU. */
export interface TorchSites {
    measure?: string;
    sites: MemorySite[];
}

export interface MemoryReport {
    measure?: string;       // what `size` means, as the writer said ("peak", "total", ...)
    peakRss?: number;       // bytes
    cuda?: { device?: string; peakAllocated?: number; peakReserved?: number };
    sites: MemorySite[];    // largest first
    skipped: number;        // entries that were not sites
    totalSize: number;
    torch?: TorchSites;
    program?: string;
}

const SITE_LISTS = ['sites', 'top', 'allocations', 'top_sites'];

export function parseMemoryReport(text: string): MemoryReport {
    let data: unknown;
    try {
        data = JSON.parse(text);
    } catch (e) {
        throw new FileFormatError(`not valid JSON: ${(e as Error).message}`);
    }
    const root = Array.isArray(data) ? { sites: data } : data;
    if (!isObject(root)) {
        throw new FileFormatError('not a tensor_dap memory report (expected a JSON object or a list of sites)');
    }
    const listKey = SITE_LISTS.find((k) => Array.isArray(root[k]));
    if (listKey === undefined) {
        throw new FileFormatError(`not a tensor_dap memory report (no ${SITE_LISTS.map((k) => `"${k}"`).join(', ')} list)`);
    }
    const { sites, skipped } = sitesOf(root[listKey] as unknown[]);
    const torch = isObject(root.torch_cpu) && Array.isArray(root.torch_cpu.sites)
        ? { measure: str(root.torch_cpu.measure), sites: sitesOf(root.torch_cpu.sites).sites }
        : undefined;
    return {
        measure: str(root.measure ?? root.kind),
        peakRss: bytes(root.peak_rss ?? root.peak_rss_bytes ?? root.peakRss),
        cuda: cudaOf(root),
        sites,
        skipped,
        totalSize: sites.reduce((s, x) => s + x.size, 0),
        torch,
        program: str(root.program),
    };
}

function sitesOf(entries: unknown[]): { sites: MemorySite[]; skipped: number } {
    const sites: MemorySite[] = [];
    let skipped = 0;
    for (const entry of entries) {
        const site = toSite(entry);
        if (site) {
            sites.push(site);
        } else {
            skipped++;
        }
    }
    sites.sort((a, b) => b.size - a.size);
    return { sites, skipped };
}

function toSite(entry: unknown): MemorySite | undefined {
    if (!isObject(entry)) {
        return undefined;
    }
    const file = str(entry.file ?? entry.filename ?? entry.path);
    const line = num(entry.line ?? entry.lineno);
    const size = bytes(entry.size ?? entry.bytes ?? entry.size_bytes);
    if (file === undefined || size === undefined) {
        return undefined;
    }
    return {
        file,
        line: line !== undefined && Number.isInteger(line) && line >= 0 ? line : 0,
        function: str(entry.function ?? entry.func ?? entry.name),
        op: str(entry.op),
        ...(entry.backward === true ? { backward: true } : {}),
        size,
        count: Math.max(0, Math.round(num(entry.count ?? entry.n ?? entry.allocations) ?? 0)),
    };
}

function cudaOf(root: Record<string, unknown>): MemoryReport['cuda'] {
    const c = root.cuda;
    if (isObject(c)) {
        const out = {
            device: str(c.device),
            peakAllocated: bytes(c.max_allocated_bytes ?? c.peak_allocated ?? c.peak_allocated_bytes ?? c.max_memory_allocated),
            peakReserved: bytes(c.max_reserved_bytes ?? c.peak_reserved ?? c.peak_reserved_bytes ?? c.max_memory_reserved),
        };
        return out.peakAllocated !== undefined || out.peakReserved !== undefined ? out : undefined;
    }
    const peak = bytes(root.cuda_peak_allocated ?? root.cuda_peak);
    return peak !== undefined ? { peakAllocated: peak, peakReserved: bytes(root.cuda_peak_reserved) } : undefined;
}

function isObject(v: unknown): v is Record<string, unknown> {
    return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function str(v: unknown): string | undefined {
    return typeof v === 'string' ? v : undefined;
}

function num(v: unknown): number | undefined {
    return typeof v === 'number' && Number.isFinite(v) ? v : undefined;
}

function bytes(v: unknown): number | undefined {
    const n = num(v);
    return n !== undefined && n >= 0 ? n : undefined;
}
