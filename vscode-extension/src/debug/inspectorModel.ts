/**
 * The tensor inspector's data: the expressions sent to debugpy and the checked shape of what
 * tensor_dap.dap.inspector answers (its module docstring defines the JSON).
 */

export const INSPECTOR = "__import__('tensor_dap')";

export function frameExpression(): string {
    return `${INSPECTOR}.inspect_frame_json(locals())`;
}

export function tensorExpression(expr: string, bins = 64, heat = 64): string {
    return `${INSPECTOR}.inspect_tensor_json(${expr}, bins=${bins | 0}, heat=${heat | 0})`;
}

export interface FrameTensor {
    name: string;
    expr: string;
    line: string | null;
    shape: number[] | null;
    dtype: string;
    device: string;
    flags: string[];
}

export interface FrameTensors {
    tensors: FrameTensor[];
    more: number;
    cutShort: boolean;
}

export interface Histogram {
    edges: number[];
    counts: number[];
    total: number;
    nonfinite: number;
    sampled: boolean;
    integer: boolean;
}

export interface Heatmap {
    rows: number;
    cols: number;
    cells: (number | null)[];
    min: number | null;
    max: number | null;
    sourceShape: number[];
    slice: string;
    sampled: boolean;
}

export interface TensorDetail {
    line: string;
    summary: Record<string, unknown>;
    histogram: Histogram | null;
    heatmap: Heatmap | null;
}

export class InspectorError extends Error {}

export function parseFrameTensors(data: unknown): FrameTensors {
    const d = checked(data);
    if (!Array.isArray(d.tensors)) {
        throw new InspectorError('the inspector returned no tensor list');
    }
    const tensors = d.tensors.filter(isObject).map((t): FrameTensor => ({
        name: String(t.name),
        expr: String(t.expr ?? t.name),
        line: typeof t.line === 'string' ? t.line : null,
        shape: Array.isArray(t.shape) ? t.shape.map(Number) : null,
        dtype: String(t.dtype ?? ''),
        device: String(t.device ?? ''),
        flags: Array.isArray(t.flags) ? t.flags.map(String) : [],
    }));
    return { tensors, more: Number(d.more) || 0, cutShort: d.cut_short === true };
}

export function parseTensorDetail(data: unknown): TensorDetail {
    const d = checked(data);
    const h = isObject(d.histogram) ? d.histogram : null;
    const m = isObject(d.heatmap) ? d.heatmap : null;
    return {
        line: String(d.line ?? ''),
        summary: isObject(d.summary) ? d.summary : {},
        histogram: h && Array.isArray(h.counts) && Array.isArray(h.edges) && h.edges.length === h.counts.length + (h.counts.length ? 1 : 0)
            ? { edges: h.edges.map(Number), counts: h.counts.map(Number), total: Number(h.total) || 0, nonfinite: Number(h.nonfinite) || 0, sampled: h.sampled === true, integer: h.integer === true }
            : null,
        heatmap: m && Array.isArray(m.cells) && Number(m.rows) * Number(m.cols) === m.cells.length
            ? {
                rows: Number(m.rows), cols: Number(m.cols),
                cells: m.cells.map((c) => (typeof c === 'number' ? c : null)),
                min: typeof m.min === 'number' ? m.min : null, max: typeof m.max === 'number' ? m.max : null,
                sourceShape: Array.isArray(m.source_shape) ? m.source_shape.map(Number) : [],
                slice: String(m.slice ?? ''), sampled: m.sampled === true,
            }
            : null,
    };
}

function checked(data: unknown): Record<string, unknown> {
    if (!isObject(data)) {
        throw new InspectorError('the inspector returned something that is not a JSON object');
    }
    if (typeof data.error === 'string') {
        throw new InspectorError(`tensor_dap could not inspect this frame: ${data.error}`);
    }
    if (data.version !== 1) {
        throw new InspectorError(`the debugged program's tensor_dap speaks inspector version ${String(data.version)}; this extension reads version 1`);
    }
    return data;
}

function isObject(v: unknown): v is Record<string, unknown> {
    return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** What a failed evaluate means for the user: tensor_dap missing in the debugged interpreter, or other. */
export function explainEvaluateError(message: string): string {
    if (/No module named '?tensor_dap/.test(message)) {
        return 'tensor_dap is not installed in the interpreter being debugged: pip install tensor-dap (into that environment), then restart the session.';
    }
    return message;
}
