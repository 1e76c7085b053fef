/**
 * What went wrong running tensor_dap in the user's Python, in words that say what to do next.
 * Pure: the caller runs the process.
 */

export class PythonError extends Error {
    constructor(message: string, readonly hint: 'settings' | 'install' | 'none' = 'none') {
        super(message);
        this.name = 'PythonError';
    }
}

/** Raised when tensor_dap's command reported a problem with the input ("tensor-dap: error: ..."). */
export class TensorDapError extends Error {}

export function explain(python: string, module: string, error: { code?: string | number; killed?: boolean; message: string }, stderr: string): Error {
    if (error.code === 'ENOENT' || error.code === 'EACCES') {
        return new PythonError(
            `Python was not found at "${python}". Select an interpreter (Python extension) or set "tensorDap.pythonPath" to the environment where tensor_dap is installed.`,
            'settings');
    }
    const missing = /No module named '?([\w.]+)'?/.exec(stderr);
    if (missing && (missing[1] === 'tensor_dap' || missing[1].startsWith('tensor_dap.'))) {
        return new PythonError(
            `tensor_dap is not installed for ${python} (or is too old to have ${module}). Install it with:\n${quote(python)} -m pip install -U tensor-dap`,
            'install');
    }
    const line = /tensor-dap: error: (.*)/.exec(stderr);
    if (line) {
        return new TensorDapError(line[1].trim());
    }
    if (error.killed) {
        return new PythonError(`${python} -m ${module} took too long and was stopped.`);
    }
    const last = stderr.trim().split('\n').slice(-1)[0] || error.message;
    return new PythonError(`${python} -m ${module} failed: ${last}`);
}

export function quote(arg: string): string {
    return /^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`;
}
