/**
 * Incident bundle reports (`.tensor_dap/incidents/<time>-step<N>/report.json`, written by
 * tensor_dap's training triggers: `Report.to_dict`). Read tolerantly: every field is optional
 * here, and those of report version 2 (`op`, `forward_op`, `source`, `loss_history`, `lr`,
 * `diagnosis`, `max_abs`, `mode`) are used when present; version 3 says in `source.near` what
 * version 2 told by its mode, phase and `source.after`. NaN/Inf arrive as the strings
 * "nan"/"inf"/"-inf".
 */
import { FileFormatError } from './errors';

export interface IncidentTensor {
    section: string;
    name: string;
    line: string;         // a short one-line description built from the summary fields
    nonfinite: boolean;
}

export interface IncidentSource {
    file: string;
    line: number;
    text?: string;
    /**
     * The line is not the loss op's own (the unchanged loop read the op from the loss's graph): 'before' it is
     * the backward() call after the loss, 'after' the model's call before it (backward() ran in a library's code).
     */
    near?: 'before' | 'after';
}

export interface IncidentReport {
    kind: string;
    headline: string;
    step?: number;
    phase?: string;
    module?: string;       // "" is the root module
    moduleType?: string;
    rank?: number;
    loss?: number;         // NaN and ±Infinity kept as numbers
    op?: string;
    forwardOp?: string;    // for a backward op, the forward op that created it
    source?: IncidentSource;
    lossHistory: [number, number][];   // [step, loss]
    lr?: number[];
    diagnosis: string[];
    notes: string[];
    tensors: IncidentTensor[];
    bundle?: string;
    created?: number;      // seconds since the epoch
    program?: string;      // the training script, when the writer records it (see the README)
    args?: string[];
    maxAbs?: number;       // the largest finite magnitude among the tensors involved
    mode?: string;         // how the bundle replays: "step", "closure" or "loop"
    version?: number;
}

export function parseIncidentReport(text: string): IncidentReport {
    let data: unknown;
    try {
        data = JSON.parse(text);
    } catch (e) {
        throw new FileFormatError(`not valid JSON: ${(e as Error).message}`);
    }
    if (!isObject(data) || (typeof data.headline !== 'string' && typeof data.kind !== 'string')) {
        throw new FileFormatError('not a tensor_dap incident report (no "headline" or "kind")');
    }
    const d = data;
    return {
        kind: str(d.kind) ?? 'unknown',
        headline: str(d.headline) ?? str(d.kind) ?? '',
        step: int(d.step),
        phase: str(d.phase),
        module: str(d.module),
        moduleType: str(d.module_type),
        rank: int(d.rank),
        loss: number(d.loss),
        op: str(d.op),
        forwardOp: str(d.forward_op),
        source: sourceOf(d.source, d),
        lossHistory: historyOf(d.loss_history, int(d.step)),
        lr: lrOf(d.lr),
        diagnosis: strings(d.diagnosis),
        notes: strings(d.notes),
        tensors: tensorsOf(d.tensors),
        bundle: str(d.bundle),
        created: number(d.created),
        program: str(d.program),
        args: Array.isArray(d.args) ? strings(d.args) : undefined,
        maxAbs: number(d.max_abs),
        mode: str(d.mode),
        version: int(d.version),
    };
}

/** "forward of encoder.layers.2 (Linear)", like the Python report's `where`. */
export function where(r: IncidentReport): string {
    const parts: string[] = [];
    if (r.phase) {
        parts.push(r.phase);
    }
    if (r.module !== undefined) {
        const type = r.moduleType ? ` (${r.moduleType})` : '';
        parts.push(`${r.phase ? 'of ' : ''}${r.module || 'the model itself'}${type}`);
    }
    return parts.join(' ');
}

function sourceOf(v: unknown, report: Record<string, unknown>): IncidentSource | undefined {
    if (!isObject(v) || typeof v.file !== 'string') {
        return undefined;
    }
    const line = int(v.line);
    const source: IncidentSource = { file: v.file, line: line !== undefined && line > 0 ? line : 1, text: str(v.text) };
    const near = (int(report.version) ?? 1) >= 3 ? v.near : nearBefore3(v, report);
    if (near === 'before' || near === 'after') {
        source.near = near;
    }
    return source;
}

/** As the Python reader of a version 2 report: an unchanged loop's loss op, or a batch's first use with no module. */
function nearBefore3(v: Record<string, unknown>, report: Record<string, unknown>): string | undefined {
    const mode = str(report.mode);
    const phase = str(report.phase);
    if (mode === 'step' || mode === 'closure' || !(phase === 'loss' || (phase === 'input' && typeof report.module !== 'string'))) {
        return undefined;
    }
    return v.after === true ? 'after' : 'before';
}

/** Accepts [loss, ...] (steps counted back from the report's step) or [[step, loss], ...] or [{step, loss}]. */
function historyOf(v: unknown, lastStep: number | undefined): [number, number][] {
    if (!Array.isArray(v)) {
        return [];
    }
    const out: [number, number][] = [];
    v.forEach((item, i) => {
        if (Array.isArray(item) && item.length >= 2) {
            const s = number(item[0]), l = number(item[1]);
            if (s !== undefined && l !== undefined) { out.push([s, l]); }
        } else if (isObject(item)) {
            const s = number(item.step), l = number(item.loss);
            if (s !== undefined && l !== undefined) { out.push([s, l]); }
        } else {
            const l = number(item);
            if (l !== undefined) {
                out.push([lastStep !== undefined ? lastStep - (v.length - 1 - i) : i, l]);
            }
        }
    });
    return out;
}

function lrOf(v: unknown): number[] | undefined {
    const single = number(v);
    if (single !== undefined) {
        return [single];
    }
    if (Array.isArray(v)) {
        const all = v.map(number).filter((x): x is number => x !== undefined);
        return all.length ? all : undefined;
    }
    return undefined;
}

function tensorsOf(v: unknown): IncidentTensor[] {
    if (!Array.isArray(v)) {
        return [];
    }
    const out: IncidentTensor[] = [];
    for (const item of v) {
        if (!Array.isArray(item) || item.length < 3 || !isObject(item[2])) {
            continue;
        }
        const s = item[2];
        // The one-line form Python rendered (reports since 0.1 store it); older reports get a compact rebuild.
        const line = typeof item[3] === 'string' ? item[3] : summaryLine(s);
        out.push({ section: String(item[0]), name: String(item[1]), line, nonfinite: !!(s.has_nan || s.has_pos_inf || s.has_neg_inf) });
    }
    return out;
}

/** A compact line from TensorSummary.to_dict fields, for reports written before the one-line form was stored. */
export function summaryLine(s: Record<string, unknown>): string {
    const parts: string[] = [];
    const shape = Array.isArray(s.shape) ? `[${s.shape.map((d) => (d === null ? '?' : String(d))).join(', ')}]` : '';
    parts.push(`${str(s.kind) ?? 'tensor'}${shape}`);
    const dtype = str(s.dtype)?.replace('torch.', '');
    if (dtype && dtype !== 'float32') {
        parts.push(dtype);
    }
    if (str(s.device) && s.device !== 'cpu') {
        parts.push(String(s.device));
    }
    const min = number(s.min), max = number(s.max), mean = number(s.mean), std = number(s.std);
    if (min !== undefined && max !== undefined) {
        parts.push(`x∈[${fmt(min)}, ${fmt(max)}]`);
    }
    if (mean !== undefined) {
        parts.push(`μ=${fmt(mean)}`);
    }
    if (std !== undefined && Number.isFinite(std)) {
        parts.push(`σ=${fmt(std)}`);
    }
    if (s.has_nan) { parts.push('NaN!'); }
    if (s.has_pos_inf) { parts.push('+Inf!'); }
    if (s.has_neg_inf) { parts.push('-Inf!'); }
    if (s.grad_fn) { parts.push(String(s.grad_fn)); }
    if (s.error) { parts.push(`(${String(s.error)})`); }
    return parts.join(' ');
}

export function fmt(x: number): string {
    if (Number.isNaN(x)) { return 'nan'; }
    if (!Number.isFinite(x)) { return x > 0 ? 'inf' : '-inf'; }
    if (x === 0) { return '0'; }
    const a = Math.abs(x);
    return a >= 1e5 || a < 1e-3 ? x.toExponential(3).replace(/\.?0+e/, 'e').replace('e+', 'e') : String(Number(x.toPrecision(4)));
}

function isObject(v: unknown): v is Record<string, unknown> {
    return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function str(v: unknown): string | undefined {
    return typeof v === 'string' ? v : undefined;
}

function strings(v: unknown): string[] {
    if (typeof v === 'string') {
        return [v];
    }
    return Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : [];
}

function number(v: unknown): number | undefined {
    if (typeof v === 'number') {
        return v;
    }
    if (v === 'nan' || v === 'NaN') { return NaN; }
    if (v === 'inf' || v === 'Infinity') { return Infinity; }
    if (v === '-inf' || v === '-Infinity') { return -Infinity; }
    return undefined;
}

function int(v: unknown): number | undefined {
    return typeof v === 'number' && Number.isInteger(v) ? v : undefined;
}
