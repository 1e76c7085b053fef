/** Why a file could not be read. Parsers throw these; views show `message` as an error page. */
export class FileFormatError extends Error {
    /**
     * @param fallback true when the file may be a format variant this reader does not know but
     *   `python -m tensor_dap.profiling.export` might (an unknown opcode); false for files that are
     *   plainly broken (truncated, wrong kind of file) or refused (a pickle naming a foreign class).
     */
    constructor(message: string, readonly fallback = false) {
        super(message);
        this.name = 'FileFormatError';
    }
}

/** The file ends in the middle of a value. */
export class TruncatedError extends FileFormatError {
    constructor(what: string) {
        super(`${what} ends early: the file is truncated or still being written`);
        this.name = 'TruncatedError';
    }
}
