/**
 * The command lines "Profile Current File" and "Open TensorBoard" run, the functions a line
 * profile can be asked for, and what a failed profile run says. Pure: the commands run them.
 */
import { PythonError, TensorDapError, explain } from '../pythonErrors';

export type ProfileMode = 'cpu' | 'line' | 'torch' | 'memory';

/** `python ARGS`: `tensor-dap profile`; `functions` become `--function` (line mode only). */
export function profileArgs(mode: ProfileMode, file: string, functions: readonly string[] = []): string[] {
    const named = mode === 'line' ? functions.flatMap((f) => ['--function', f]) : [];
    return ['-m', 'tensor_dap', 'profile', '--mode', mode, ...named, file];  // options before the script: the rest is its argv
}

/** `python ARGS`: `tensor-dap tensorboard` for one log folder on one port. */
export function tensorBoardArgs(logdir: string, port: number): string[] {
    return ['-m', 'tensor_dap', 'tensorboard', logdir, '--port', String(port)];
}

export interface PythonFunction {
    name: string;   // what --function takes: "train_step", "Net.forward"
    line: number;   // 1-based
}

/**
 * The top-level functions and the methods of top-level classes, in file order, read by
 * indentation (no Python parser in the extension host; nested functions are left out).
 */
export function pythonFunctions(source: string): PythonFunction[] {
    const out: PythonFunction[] = [];
    let cls: { name: string; indent?: number } | undefined;
    const lines = source.split(/\r?\n/);
    for (let i = 0; i < lines.length; i++) {
        const text = lines[i];
        const m = /^([ \t]*)(?:async[ \t]+)?def[ \t]+(\w+)[ \t]*[([]/.exec(text);
        const indent = /^[ \t]*/.exec(text)![0].length;
        if (text.trim() === '' || text.trimStart().startsWith('#')) {
            continue;
        }
        if (indent === 0) {
            const c = /^class[ \t]+(\w+)/.exec(text);
            cls = c ? { name: c[1] } : undefined;
            if (m) {
                out.push({ name: m[2], line: i + 1 });
            }
            continue;
        }
        if (cls && m) {
            cls.indent ??= indent;  // the first def in the class body sets the body's indent
            if (indent === cls.indent) {
                out.push({ name: `${cls.name}.${m[2]}`, line: i + 1 });
            }
        }
    }
    return out;
}

/** Whether a function carries a profile mark (`@tensor_dap.profile`, `@profile`): line mode then needs no --function. */
export function hasProfileMarks(source: string): boolean {
    return /^[ \t]*@(?:[\w.]+\.)?profile[ \t]*(?:#.*)?$/m.test(source);
}

/**
 * The one line to show when `tensor-dap profile` failed: tensor_dap's own error, how to get a
 * Python with tensor_dap, or the program's exit code and last line.
 */
export function profileFailure(python: string, result: { code?: number; spawnError?: string }, stderr: string): string {
    const error = result.spawnError !== undefined
        ? { code: result.spawnError, message: result.spawnError }
        : { code: result.code, message: `exit code ${result.code}` };
    const e = explain(python, 'tensor_dap', error, stderr);
    if (e instanceof TensorDapError) {
        return `tensor_dap profile: ${e.message}`;
    }
    if (e instanceof PythonError && e.hint !== 'none') {
        return e.message;
    }
    const last = stderr.trim().split('\n').slice(-1)[0]?.trim();
    return `tensor_dap: the profiled program exited with code ${result.code}${last ? ` (${last})` : ''}; see the terminal.`;
}
