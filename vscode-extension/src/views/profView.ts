/**
 * View models over a pstats profile: the table's columns, callers and callees of a function,
 * and an icicle layout of the call tree. Pure; the webview only draws what these return.
 */
import type { ImportSplit } from '../parsers/importSplit';
import type { CallEdge, PstatsModel } from '../parsers/pstats';

/** The table, column by column (compact to post to a webview: 50k rows in a few MB). */
export interface ProfTable {
    totalTime: number;
    files: string[];            // distinct file names; `file` indexes this list
    name: string[];
    file: number[];
    line: number[];
    calls: number[];
    primitive: number[];
    own: number[];
    cumulative: number[];
}

export function profTable(model: PstatsModel): ProfTable {
    const fileIds = new Map<string, number>();
    const files: string[] = [];
    const n = model.functions.length;
    const t: ProfTable = {
        totalTime: model.total_time, files, name: new Array(n), file: new Array(n), line: new Array(n),
        calls: new Array(n), primitive: new Array(n), own: new Array(n), cumulative: new Array(n),
    };
    model.functions.forEach((f, i) => {
        let id = fileIds.get(f.file);
        if (id === undefined) {
            id = files.push(f.file) - 1;
            fileIds.set(f.file, id);
        }
        t.name[i] = f.name;
        t.file[i] = id;
        t.line[i] = f.line;
        t.calls[i] = f.calls;
        t.primitive[i] = f.primitive_calls;
        t.own[i] = f.own;
        t.cumulative[i] = f.cumulative;
    });
    return t;
}

export interface Relative {
    id: number;
    calls: number;
    own: number;
    cumulative: number;
}

export class CallGraph {
    private readonly callees: CallEdge[][];

    constructor(private readonly model: PstatsModel) {
        this.callees = model.functions.map(() => []);
        for (const f of model.functions) {
            for (const [caller, nc, cc, tt, ct] of f.callers) {
                this.callees[caller].push([f.id, nc, cc, tt, ct]);
            }
        }
    }

    /** Who called `id`, and the time spent in `id` on their behalf; most time first. */
    callersOf(id: number): Relative[] {
        return this.model.functions[id].callers.map(edgeRelative).sort(byCumulative);
    }

    /** What `id` called, and the time those calls took; most time first. */
    calleesOf(id: number): Relative[] {
        return this.callees[id].map(edgeRelative).sort(byCumulative);
    }

    /**
     * Where the call tree starts: the function with the most cumulative time (cProfile does not
     * record the frame that started profiling, and that function, typically `exec`, is often
     * also called from elsewhere, so "has no callers" misses it), then any function nothing
     * called, largest first. `cumulative`: each function's time (-1: left out of the tree).
     */
    roots(cumulative: (id: number) => number = (id) => this.model.functions[id].cumulative): { id: number; time: number }[] {
        const fns = this.model.functions.filter((f) => cumulative(f.id) >= 0);
        if (!fns.length) {
            return [];
        }
        const main = fns.reduce((best, f) => (cumulative(f.id) > cumulative(best.id) ? f : best), fns[0]);
        const uncalled = fns.filter((f) => f !== main && f.callers.every(([c]) => c === f.id || cumulative(c) < 0));
        return [main, ...uncalled]
            .map((f) => ({ id: f.id, time: cumulative(f.id) }))
            .sort((a, b) => b.time - a.time);
    }

    /**
     * An icicle of the call tree. pstats keeps only caller→callee totals, so a node's children
     * are its function's callees, each scaled by the share of the function's time this node
     * stands for. Recursion is cut where a call edge (caller → callee) would repeat on the path
     * (a function may appear under itself once: `exec` runs the script, which runs `exec` for
     * imports), and nodes thinner than `minFraction` of the root are left out. `without`: the
     * time spent importing left out (tensor_dap's estimate): the functions that are all import are
     * not in the tree, and each call's time is cut in the share its callee's time was cut.
     */
    icicle(opts: { minFraction?: number; maxNodes?: number; maxDepth?: number; without?: ImportSplit } = {}): IcicleNode[] {
        const minFraction = opts.minFraction ?? 0.002;
        const maxNodes = opts.maxNodes ?? 6000;
        const maxDepth = opts.maxDepth ?? 64;
        const fns = this.model.functions;
        const split = opts.without;
        const cumulative = split ? (id: number) => split.cumulative[id] : (id: number) => fns[id].cumulative;
        // a call's time with its callee's imports taken out, as a share of it (pstats has no per-call split)
        const kept = (id: number) => (!split ? 1 : fns[id].cumulative > 0 ? Math.max(split.cumulative[id], 0) / fns[id].cumulative : 0);
        const roots = this.roots(cumulative);
        const rootTotal = roots.reduce((s, r) => s + r.time, 0);
        if (!(rootTotal > 0)) {
            return [];
        }
        const minTime = rootTotal * minFraction;
        const out: IcicleNode[] = [];
        const n = this.model.functions.length;
        const onPath = new Set<number>();  // caller * n + callee
        const visit = (id: number, time: number, x: number, depth: number) => {
            if (out.length >= maxNodes) {
                return;
            }
            out.push({ id, depth, x: x / rootTotal, w: time / rootTotal, time });
            if (depth + 1 >= maxDepth) {
                return;
            }
            const whole = cumulative(id);
            const scale = whole > 0 ? Math.min(1, time / whole) : 0;
            let cx = x;
            const children = this.callees[id]
                .filter(([callee]) => !onPath.has(id * n + callee) && cumulative(callee) >= 0)
                .map(([callee, , , , ct]) => [callee, ct * kept(callee) * scale] as const)
                .sort((a, b) => b[1] - a[1]);
            let used = 0;
            for (const [callee, ctScaled] of children) {
                const t = Math.min(ctScaled, time - used);  // pstats totals can overshoot through recursion
                if (t < minTime) {
                    break;
                }
                onPath.add(id * n + callee);
                visit(callee, t, cx, depth + 1);
                onPath.delete(id * n + callee);
                cx += t;
                used += t;
            }
        };
        let x = 0;
        for (const r of roots) {
            if (r.time < minTime || out.length >= maxNodes) {
                break;
            }
            visit(r.id, r.time, x, 0);
            x += r.time;
        }
        return out;
    }
}

export interface IcicleNode {
    id: number;     // function id
    depth: number;
    x: number;      // start, fraction of the root width
    w: number;      // width, fraction of the root width
    time: number;   // seconds this node stands for
}

function edgeRelative([id, nc, , tt, ct]: CallEdge): Relative {
    return { id, calls: nc, own: tt, cumulative: ct };
}

function byCumulative(a: Relative, b: Relative): number {
    return b.cumulative - a.cumulative;
}
