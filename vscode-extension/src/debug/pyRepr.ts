/**
 * debugpy answers an `evaluate` whose value is a Python `str` with that string's `repr`:
 * quoted with ' (or " when the text holds ' but no "), backslashes and the quote escaped, and
 * non-printable characters as \n, \t, \xNN, \uNNNN, \UNNNNNNNN. Outside the "clipboard" and
 * "repl" contexts it also shortens long values by cutting out the middle; a cut string no longer
 * parses, and `decodePyStr` says so instead of returning half a value.
 */

export class ReprError extends Error {
    constructor(message: string) {
        super(message);
        this.name = 'ReprError';
    }
}

const SIMPLE: Record<string, string> = { '\\': '\\', "'": "'", '"': '"', n: '\n', r: '\r', t: '\t', a: '\x07', b: '\b', f: '\f', v: '\v', '0': '\0' };

export function decodePyStr(repr: string): string {
    const text = repr.trim();
    const quote = text[0];
    if ((quote !== "'" && quote !== '"') || text.length < 2 || text[text.length - 1] !== quote) {
        throw new ReprError(`not a Python string literal: ${text.slice(0, 60)}`);
    }
    let out = '';
    const end = text.length - 1;
    for (let i = 1; i < end; i++) {
        const c = text[i];
        if (c === quote) {
            throw new ReprError('the debugger shortened the value (an unescaped quote inside it)');
        }
        if (c !== '\\') {
            out += c;
            continue;
        }
        const e = text[++i];
        if (i >= end) {
            throw new ReprError('the string literal ends in a backslash');
        }
        if (e in SIMPLE) {
            out += SIMPLE[e];
        } else if (e === 'x' || e === 'u' || e === 'U') {
            const len = e === 'x' ? 2 : e === 'u' ? 4 : 8;
            const hex = text.slice(i + 1, i + 1 + len);
            if (hex.length !== len || !/^[0-9a-fA-F]+$/.test(hex) || i + len >= end) {
                throw new ReprError(`a broken \\${e} escape in the string literal`);
            }
            out += String.fromCodePoint(parseInt(hex, 16));
            i += len;
        } else {
            out += `\\${e}`;  // Python keeps unknown escapes as written
        }
    }
    return out;
}

/** The JSON a tensor_dap inspector function returned through `evaluate`, parsed. */
export function decodeJsonResult(result: string): unknown {
    const text = decodePyStr(result);
    try {
        return JSON.parse(text);
    } catch (e) {
        throw new ReprError(`the inspector's answer is not JSON (${(e as Error).message}); was it cut short?`);
    }
}
