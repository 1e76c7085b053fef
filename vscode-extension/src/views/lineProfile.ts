/**
 * What the line-profile decorations show: for each profiled line, its time, share of its
 * function, hits and a heat level; and which profiled file a source document is. Pure.
 */
import type { LprofModel } from '../parsers/lprof';

export interface LineMark {
    line: number;       // 1-based
    time: number;       // seconds
    percent: number;    // of its function's total
    hits: number;
    heat: number;       // 0..HEAT_LEVELS-1, by percent
    label: string;      // the text shown after the line
}

export const HEAT_LEVELS = 6;

/** Marks for every line of every function recorded for `profiledFile`. */
export function lineMarks(model: LprofModel, profiledFile: string): LineMark[] {
    const marks: LineMark[] = [];
    for (const fn of model.functions) {
        if (fn.file !== profiledFile) {
            continue;
        }
        for (const [line, hits, time] of fn.lines) {
            const percent = fn.total > 0 ? (100 * time) / fn.total : 0;
            marks.push({ line, time, percent, hits, heat: heatLevel(percent), label: `${formatSeconds(time)}  ${percent.toFixed(1)}%  ${hits.toLocaleString('en-US')} hit${hits === 1 ? '' : 's'}` });
        }
    }
    return marks.sort((a, b) => a.line - b.line);
}

export function heatLevel(percent: number): number {
    if (!(percent > 0)) {
        return 0;
    }
    // 0-1% cold, then doubling bands up to 32%+ hot
    return Math.min(HEAT_LEVELS - 1, Math.max(0, Math.floor(Math.log2(percent)) + 1));
}

export function formatSeconds(s: number): string {
    if (s >= 1) { return `${s.toFixed(2)} s`; }
    if (s >= 1e-3) { return `${(s * 1e3).toFixed(1)} ms`; }
    if (s >= 1e-6) { return `${(s * 1e6).toFixed(1)} µs`; }
    return s > 0 ? `${(s * 1e9).toFixed(0)} ns` : '0';
}

/**
 * The profiled file a document at `docPath` corresponds to: the same path, else the profiled
 * path sharing the longest tail of path segments with it (at least the file name), so a profile
 * taken on another machine or in another checkout still lands on the right file.
 */
export function matchProfiledFile(profiledFiles: string[], docPath: string): string | undefined {
    const norm = (p: string) => p.replace(/\\/g, '/');
    const doc = norm(docPath);
    if (profiledFiles.some((f) => norm(f) === doc)) {
        return profiledFiles.find((f) => norm(f) === doc);
    }
    const docParts = doc.split('/').reverse();
    let best: string | undefined;
    let bestScore = 0;
    let tie = false;
    for (const f of profiledFiles) {
        const parts = norm(f).split('/').reverse();
        let score = 0;
        while (score < parts.length && score < docParts.length && parts[score] === docParts[score]) {
            score++;
        }
        if (score > bestScore) {
            best = f;
            bestScore = score;
            tie = false;
        } else if (score === bestScore && score > 0 && f !== best) {
            tie = true;
        }
    }
    return bestScore > 0 && !tie ? best : undefined;
}
