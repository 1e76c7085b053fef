/**
 * A reader for Python's `marshal` format (versions 2-5), enough for pstats files: None, bools,
 * ints, floats, strings, bytes, tuples, lists, dicts, sets and back-references. Code objects are
 * refused. Pure: bytes in, plain values out, no Python needed.
 *
 * Tuples become `PyTuple` (a frozen array, so dict keys that are tuples stay recognisable), dicts
 * become `PyDict` (an entry list: pstats keys are tuples, which a JS Map cannot look up by value).
 */
import { FileFormatError, TruncatedError } from './errors';

export class PyTuple extends Array<PyValue> {}
export class PyDict {
    constructor(readonly entries: [PyValue, PyValue][]) {}
}
export class PyBytes {
    constructor(readonly bytes: Uint8Array) {}
}
export type PyValue = null | boolean | number | bigint | string | PyBytes | PyTuple | PyValue[] | PyDict | Set<PyValue>;

const FLAG_REF = 0x80;
const MAX_DEPTH = 200;  // CPython's own limit is 2000; pstats nests 4 deep

const latin1 = new TextDecoder('latin1');
const utf8 = new TextDecoder('utf-8');

export function loadMarshal(data: Uint8Array): PyValue {
    const reader = new MarshalReader(data);
    const value = reader.read(0);
    return value;
}

class MarshalReader {
    private pos = 0;
    private readonly refs: PyValue[] = [];
    private readonly view: DataView;

    constructor(private readonly data: Uint8Array) {
        this.view = new DataView(data.buffer, data.byteOffset, data.byteLength);
    }

    read(depth: number): PyValue {
        if (depth > MAX_DEPTH) {
            throw new FileFormatError('marshal data nested too deeply');
        }
        const code = this.u8();
        const flag = (code & FLAG_REF) !== 0;
        const type = String.fromCharCode(code & ~FLAG_REF);
        // Containers take their reference slot before their items are read, like CPython.
        const slot = flag ? this.refs.push(null) - 1 : -1;
        const value = this.readType(type, depth, slot);
        if (slot >= 0) {
            this.refs[slot] = value;
        }
        return value;
    }

    private readType(type: string, depth: number, slot: number): PyValue {
        switch (type) {
            case 'N': return null;
            case 'F': return false;
            case 'T': return true;
            case 'i': return this.i32();
            case 'l': return this.long();
            case 'g': return this.f64();
            case 'f': return Number(this.ascii(this.u8()));
            case 'z': case 'Z': return this.ascii(this.u8());
            case 'a': case 'A': return this.ascii(this.len());
            case 'u': case 't': return utf8.decode(this.take(this.len()));
            case 's': return new PyBytes(this.take(this.len()).slice());
            case ')': return this.items(this.u8(), depth, slot, new PyTuple());
            case '(': return this.items(this.len(), depth, slot, new PyTuple());
            case '[': return this.items(this.len(), depth, slot, []);
            case '{': return this.dict(depth, slot);
            case '<': case '>': return new Set(this.items(this.len(), depth, slot, []));
            case 'r': {
                const index = this.len();
                if (index >= this.refs.length) {
                    throw new FileFormatError(`marshal back-reference ${index} points past the ${this.refs.length} values read`);
                }
                return this.refs[index];
            }
            case '0': throw new FileFormatError('unexpected end marker in marshal data');
            case 'c': throw new FileFormatError('marshal data holds a code object: not a pstats file');
            default:
                throw new FileFormatError(
                    `unknown marshal type 0x${type.charCodeAt(0).toString(16)} at byte ${this.pos - 1}`, true);
        }
    }

    private items<T extends PyValue[]>(n: number, depth: number, slot: number, out: T): T {
        if (slot >= 0) {
            this.refs[slot] = out;
        }
        for (let i = 0; i < n; i++) {
            out.push(this.read(depth + 1));
        }
        return out;
    }

    private dict(depth: number, slot: number): PyDict {
        const out = new PyDict([]);
        if (slot >= 0) {
            this.refs[slot] = out;
        }
        for (;;) {
            if (this.pos >= this.data.length) {
                throw new TruncatedError('marshal data');
            }
            if ((this.data[this.pos] & ~FLAG_REF) === 0x30 /* '0' */) {
                this.pos++;
                return out;
            }
            const key = this.read(depth + 1);
            out.entries.push([key, this.read(depth + 1)]);
        }
    }

    private long(): number | bigint {
        const n = this.i32();
        const digits = Math.abs(n);
        let value = 0n;
        // Digits are 15-bit, least significant first.
        const start = this.need(digits * 2);
        for (let i = digits - 1; i >= 0; i--) {
            value = (value << 15n) | BigInt(this.view.getUint16(start + i * 2, true));
        }
        const signed = n < 0 ? -value : value;
        return signed >= BigInt(Number.MIN_SAFE_INTEGER) && signed <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(signed) : signed;
    }

    private ascii(n: number): string {
        return latin1.decode(this.take(n));
    }

    private len(): number {
        const n = this.i32();
        if (n < 0) {
            throw new FileFormatError(`negative length ${n} in marshal data`);
        }
        return n;
    }

    private u8(): number {
        return this.data[this.need(1)];
    }

    private i32(): number {
        return this.view.getInt32(this.need(4), true);
    }

    private f64(): number {
        return this.view.getFloat64(this.need(8), true);
    }

    private take(n: number): Uint8Array {
        const at = this.need(n);
        return this.data.subarray(at, at + n);
    }

    /** Advances past n bytes and returns where they start; throws at the end of the data. */
    private need(n: number): number {
        if (this.pos + n > this.data.length) {
            throw new TruncatedError('marshal data');
        }
        const at = this.pos;
        this.pos += n;
        return at;
    }
}
