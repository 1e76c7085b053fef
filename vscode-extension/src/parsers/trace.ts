/**
 * A summary of a torch.profiler Chrome trace, built one event at a time (see TraceEventStream):
 * the top operators by self time (CPU and, when kernels are present, CUDA), with their most
 * common input shapes, and a timeline of the longest events per thread or stream. Only the
 * summary, a few hundred kilobytes at most, ever leaves the extension host.
 *
 * Self CPU time of an operator is its duration minus that of the operators nested directly
 * inside it on the same thread (what torch.profiler's table calls "Self CPU"). A kernel's time
 * is charged to the operator that launched it, found through the "External id" both carry.
 */

export interface OpRow {
    name: string;
    calls: number;
    selfCpu: number;    // µs
    totalCpu: number;   // µs
    selfCuda: number;   // µs, kernels launched by this op
    shapes: [string, number][];  // most common "Input Dims", with their counts
}

export interface TimelineEvent {
    lane: number;
    name: string;
    cat: string;
    start: number;   // µs from the trace's first event
    dur: number;     // µs
    depth: number;   // nesting among the events kept in its lane
}

export interface TraceSummary {
    events: number;
    spanUs: number;
    ops: OpRow[];
    opsTotal: number;            // distinct operator names (ops holds the top ones)
    categories: [string, number, number][];  // [cat, events, total µs]
    lanes: string[];
    timeline: TimelineEvent[];
    timelineDropped: number;     // events too short to keep
    steps: number;               // ProfilerStep#N spans
    hasCuda: boolean;
    metadata: { deviceProperties?: unknown[]; schemaVersion?: unknown };
}

const TOP_OPS = 500;
const TIMELINE_EVENTS = 4000;
const SHAPES_PER_OP = 3;
const OP_CATS = new Set(['cpu_op', 'user_annotation', 'operator']);
const KERNEL_CATS = new Set(['kernel', 'gpu_memcpy', 'gpu_memset', 'Kernel', 'Memcpy', 'Memset']);

interface OpAgg {
    calls: number;
    total: number;
    selfCuda: number;
    shapes: Map<string, number>;
}

/** Growable columns of numbers: 300k events cost a few MB, not 300k objects. */
class Column {
    data: Float64Array;
    length = 0;
    constructor(capacity = 1024) {
        this.data = new Float64Array(capacity);
    }
    push(v: number): void {
        if (this.length === this.data.length) {
            const next = new Float64Array(this.data.length * 2);
            next.set(this.data);
            this.data = next;
        }
        this.data[this.length++] = v;
    }
}

export class TraceAggregator {
    private events = 0;
    private minTs = Infinity;
    private maxEnd = -Infinity;
    private readonly names: string[] = [];
    private readonly nameIds = new Map<string, number>();
    private readonly cats: string[] = [];
    private readonly catIds = new Map<string, number>();
    private readonly laneIds = new Map<unknown, Map<unknown, number>>();
    private readonly laneKeys: [string, string][] = [];
    private readonly pidNames = new Map<string, string>();
    private readonly tidNames = new Map<string, string>();
    // every complete event: lane, ts, dur, name, category
    private readonly lane = new Column();
    private readonly ts = new Column();
    private readonly dur = new Column();
    private readonly name = new Column();
    private readonly cat = new Column();
    private readonly isOp: number[] = [];           // indices of operator events
    private readonly isFrame: number[] = [];        // indices of Python frames (with_stack): not rows, but they nest
    private readonly opShape = new Map<number, string>();  // event index -> input dims
    private readonly opByExternal = new Map<number, number>();  // External id -> event index
    private readonly kernelExternal: [number, number][] = [];  // [External id, dur]
    private readonly open = new Map<string, Record<string, unknown>[]>();  // B/E pairs per lane
    private readonly catCount: number[] = [];
    private readonly catTime: number[] = [];
    private steps = 0;
    private hasCuda = false;

    add(e: Record<string, unknown>): void {
        this.events++;
        const ph = e.ph;
        if (ph === 'M') {
            this.metadataEvent(e);
            return;
        }
        if (ph === 'B' || ph === 'E') {
            this.beginEnd(e);
            return;
        }
        if (ph !== 'X') {
            return;
        }
        const ts = Number(e.ts);
        const dur = Number(e.dur);
        if (!Number.isFinite(ts) || !Number.isFinite(dur) || dur < 0) {
            return;
        }
        this.complete(e, ts, dur);
    }

    private complete(e: Record<string, unknown>, ts: number, dur: number): void {
        const name = typeof e.name === 'string' ? e.name : String(e.name ?? '?');
        const cat = typeof e.cat === 'string' ? e.cat : '';
        const index = this.ts.length;
        const catId = this.intern(cat, this.cats, this.catIds);
        this.lane.push(this.laneOf(e.pid, e.tid));
        this.ts.push(ts);
        this.dur.push(dur);
        this.name.push(this.intern(name, this.names, this.nameIds));
        this.cat.push(catId);
        if (ts < this.minTs) { this.minTs = ts; }
        if (ts + dur > this.maxEnd) { this.maxEnd = ts + dur; }
        this.catCount[catId] = (this.catCount[catId] ?? 0) + 1;
        this.catTime[catId] = (this.catTime[catId] ?? 0) + dur;
        const args = e.args as Record<string, unknown> | undefined;
        if (OP_CATS.has(cat) || cat === '') {  // a trace without categories: every event is an operator
            this.isOp.push(index);
            if (args && typeof args === 'object') {
                const dims = args['Input Dims'] ?? args['Input dims'];
                if (Array.isArray(dims) && dims.length) {
                    this.opShape.set(index, dimsKey(dims));
                }
                const ext = args['External id'];
                if (typeof ext === 'number') {
                    this.opByExternal.set(ext, index);
                }
            }
        } else if (cat === 'python_function') {
            this.isFrame.push(index);
        } else if (KERNEL_CATS.has(cat)) {
            this.hasCuda = true;
            const ext = args && typeof args === 'object' ? args['External id'] : undefined;
            if (typeof ext === 'number') {
                this.kernelExternal.push([ext, dur]);
            }
        }
        if (name.startsWith('ProfilerStep#')) {
            this.steps++;
        }
    }

    /** The lane (thread or stream) of an event: nested maps, no key string built per event. */
    private laneOf(pid: unknown, tid: unknown): number {
        let byTid = this.laneIds.get(pid);
        if (!byTid) {
            byTid = new Map();
            this.laneIds.set(pid, byTid);
        }
        let lane = byTid.get(tid);
        if (lane === undefined) {
            lane = this.laneKeys.push([String(pid), String(tid)]) - 1;
            byTid.set(tid, lane);
        }
        return lane;
    }

    private beginEnd(e: Record<string, unknown>): void {
        const key = `${String(e.pid)}\u0000${String(e.tid)}`;
        const stack = this.open.get(key) ?? [];
        this.open.set(key, stack);
        if (e.ph === 'B') {
            stack.push(e);
            return;
        }
        const begin = stack.pop();
        const ts = Number(begin?.ts);
        const end = Number(e.ts);
        if (begin && Number.isFinite(ts) && Number.isFinite(end) && end >= ts) {
            this.complete(begin, ts, end - ts);
        }
    }

    private metadataEvent(e: Record<string, unknown>): void {
        const args = (e.args ?? {}) as Record<string, unknown>;
        if (typeof args.name !== 'string') {
            return;
        }
        if (e.name === 'process_name') {
            this.pidNames.set(String(e.pid), args.name);
        } else if (e.name === 'thread_name') {
            this.tidNames.set(`${String(e.pid)}\u0000${String(e.tid)}`, args.name);
        }
    }

    private intern(s: string, list: string[], ids: Map<string, number>): number {
        let id = ids.get(s);
        if (id === undefined) {
            id = list.push(s) - 1;
            ids.set(s, id);
        }
        return id;
    }

    finish(metadata: Record<string, unknown> = {}): TraceSummary {
        const selfCpu = this.selfTimes();
        const agg = new Map<number, OpAgg>();
        for (const i of this.isOp) {
            const id = this.name.data[i];
            const a = agg.get(id) ?? { calls: 0, total: 0, selfCuda: 0, shapes: new Map() };
            agg.set(id, a);
            a.calls++;
            a.total += this.dur.data[i];
            const shape = this.opShape.get(i);
            if (shape !== undefined) {
                a.shapes.set(shape, (a.shapes.get(shape) ?? 0) + 1);
            }
        }
        const selfById = new Map<number, number>();
        this.isOp.forEach((i, k) => {
            const id = this.name.data[i];
            selfById.set(id, (selfById.get(id) ?? 0) + selfCpu[k]);
        });
        for (const [ext, dur] of this.kernelExternal) {
            const i = this.opByExternal.get(ext);
            if (i !== undefined) {
                agg.get(this.name.data[i])!.selfCuda += dur;
            }
        }
        const ops: OpRow[] = [...agg.entries()].map(([id, a]) => ({
            name: this.names[id],
            calls: a.calls,
            selfCpu: selfById.get(id) ?? 0,
            totalCpu: a.total,
            selfCuda: a.selfCuda,
            shapes: [...a.shapes.entries()].sort((x, y) => y[1] - x[1]).slice(0, SHAPES_PER_OP),
        }));
        ops.sort((x, y) => y.selfCuda + y.selfCpu - (x.selfCuda + x.selfCpu));
        const { timeline, dropped } = this.timeline();
        return {
            events: this.events,
            spanUs: Number.isFinite(this.minTs) ? this.maxEnd - this.minTs : 0,
            ops: ops.slice(0, TOP_OPS),
            opsTotal: ops.length,
            categories: this.cats.map((c, i): [string, number, number] => [c || '(none)', this.catCount[i] ?? 0, this.catTime[i] ?? 0])
                .filter(([, n]) => n > 0)
                .sort((x, y) => y[2] - x[2]),
            lanes: this.laneKeys.map((k) => this.laneName(k)),
            timeline,
            timelineDropped: dropped,
            steps: this.steps,
            hasCuda: this.hasCuda,
            metadata: {
                deviceProperties: Array.isArray(metadata.deviceProperties) ? metadata.deviceProperties : undefined,
                schemaVersion: metadata.schemaVersion,
            },
        };
    }

    /** Self time of each operator event (same order as isOp): a per-thread nesting walk. Python frames nest in
     *  it as in torch's key_averages (and so the terminal's table): a range's self time leaves out the Python
     *  it ran (`Optimizer.step#SGD.step` without `_single_tensor_sgd`), an op inside a frame is the frame's. */
    private selfTimes(): Float64Array {
        const nested = this.isOp.length && this.isFrame.length ? this.isOp.concat(this.isFrame) : this.isOp;  // ops first
        const n = nested.length;
        const self = new Float64Array(n);
        const order = Array.from({ length: n }, (_, k) => k);
        const ts = this.ts.data, dur = this.dur.data, lane = this.lane.data;
        order.sort((a, b) => lane[nested[a]] - lane[nested[b]] || ts[nested[a]] - ts[nested[b]] || dur[nested[b]] - dur[nested[a]]);
        const stack: number[] = [];
        let currentLane = -1;
        for (const k of order) {
            const i = nested[k];
            self[k] = dur[i];
            if (lane[i] !== currentLane) {
                stack.length = 0;
                currentLane = lane[i];
            }
            const end = ts[i] + dur[i];
            while (stack.length && ts[nested[stack[stack.length - 1]]] + dur[nested[stack[stack.length - 1]]] < end - 1e-3) {
                stack.pop();
            }
            if (stack.length) {
                self[stack[stack.length - 1]] -= dur[i];
            }
            stack.push(k);
        }
        const ops = self.subarray(0, this.isOp.length);
        for (let k = 0; k < ops.length; k++) {
            ops[k] = Math.max(0, ops[k]);
        }
        return ops;
    }

    /** The longest events (all categories), with their nesting depth within their lane. */
    private timeline(): { timeline: TimelineEvent[]; dropped: number } {
        const n = this.ts.length;
        const ts = this.ts.data, dur = this.dur.data, lane = this.lane.data;
        let keep: number[];
        if (n <= TIMELINE_EVENTS) {
            keep = Array.from({ length: n }, (_, i) => i);
        } else {
            // The duration of the TIMELINE_EVENTS-th longest event, from a sorted copy of durations.
            const sorted = Float64Array.from(dur.subarray(0, n)).sort();
            const cut = sorted[n - TIMELINE_EVENTS];
            keep = [];
            for (let i = 0; i < n && keep.length < TIMELINE_EVENTS; i++) {
                if (dur[i] > cut) {
                    keep.push(i);
                }
            }
            for (let i = 0; i < n && keep.length < TIMELINE_EVENTS; i++) {
                if (dur[i] === cut) {
                    keep.push(i);
                }
            }
        }
        keep.sort((a, b) => lane[a] - lane[b] || ts[a] - ts[b] || dur[b] - dur[a]);
        const out: TimelineEvent[] = [];
        const ends: number[] = [];
        let currentLane = -1;
        for (const i of keep) {
            if (lane[i] !== currentLane) {
                ends.length = 0;
                currentLane = lane[i];
            }
            while (ends.length && ends[ends.length - 1] <= ts[i] + 1e-3) {
                ends.pop();
            }
            out.push({
                lane: lane[i], name: this.names[this.name.data[i]], cat: this.cats[this.cat.data[i]],
                start: ts[i] - this.minTs, dur: dur[i], depth: ends.length,
            });
            ends.push(ts[i] + dur[i]);
        }
        return { timeline: out, dropped: n - keep.length };
    }

    private laneName([pid, tid]: [string, string]): string {
        const process = this.pidNames.get(pid) ?? `process ${pid}`;
        const thread = this.tidNames.get(`${pid}\u0000${tid}`) ?? `thread ${tid}`;
        return `${process} · ${thread}`;
    }
}

/** "[[8,16],[16,32],[]]": the JSON text of torch's "Input Dims", built without JSON.stringify's generality. */
export function dimsKey(dims: unknown[]): string {
    let out = '[';
    for (let i = 0; i < dims.length; i++) {
        const d = dims[i];
        if (i) { out += ','; }
        if (Array.isArray(d) && d.every((x) => typeof x === 'number')) {
            out += `[${d.join(',')}]`;
        } else {
            out += JSON.stringify(d);
        }
    }
    return out + ']';
}
