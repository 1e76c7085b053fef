/**
 * A reader for Python's `marshal` format (versions 2-5), enough for pstats files: None, bools,
 * ints, floats, strings, bytes, tuples, lists, dicts, sets and back-references. Code objects are
 * refused. Pure: bytes in, plain values out, no Python needed.
 *
 * Tuples become plain arrays and lists `PyList`, so the two stay apart; dicts become `PyDict` (an
 * entry list: pstats keys are tuples, which a JS Map cannot look up by value). Written for speed:
 * a 50,000-function profile is about a million values.
 */
import { FileFormatError, TruncatedError } from './errors';

export class PyList {
    constructor(readonly items: PyValue[]) {}
}
/** Keys and values in two parallel lists (no pair object per entry: profiles have a million values). */
export class PyDict {
    readonly keys: PyValue[] = [];
    readonly values: PyValue[] = [];

    set(key: PyValue, value: PyValue): void {
        this.keys.push(key);
        this.values.push(value);
    }

    /** The value of a string key (for the few named fields a pickle's state holds). */
    get(key: string): PyValue | undefined {
        const i = this.keys.indexOf(key);
        return i < 0 ? undefined : this.values[i];
    }
}
export class PyBytes {
    constructor(readonly bytes: Uint8Array) {}
}
/** A tuple is a plain array; a list is a PyList. */
export type PyValue = null | boolean | number | bigint | string | PyBytes | PyValue[] | PyList | PyDict | Set<PyValue>;

const FLAG_REF = 0x80;
const MAX_DEPTH = 200;  // CPython's own limit is 2000; pstats nests 4 deep

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
        if (this.pos >= this.data.length) {
            throw new TruncatedError('marshal data');
        }
        const code = this.data[this.pos++];
        // Containers take their reference slot before their items are read, like CPython.
        const slot = code & FLAG_REF ? this.refs.push(null) - 1 : -1;
        const value = this.readType(code & ~FLAG_REF, depth, slot);
        if (slot >= 0) {
            this.refs[slot] = value;
        }
        return value;
    }

    private readType(type: number, depth: number, slot: number): PyValue {
        switch (type) {
            case 0x4e /* N */: return null;
            case 0x46 /* F */: return false;
            case 0x54 /* T */: return true;
            case 0x69 /* i */: return this.i32();
            case 0x6c /* l */: return this.long();
            case 0x67 /* g */: return this.f64();
            case 0x66 /* f */: return Number(this.ascii(this.u8()));
            case 0x7a /* z */: case 0x5a /* Z */: return this.ascii(this.u8());
            case 0x61 /* a */: case 0x41 /* A */: return this.ascii(this.len());
            case 0x75 /* u */: case 0x74 /* t */: return this.text(this.len());
            case 0x73 /* s */: return new PyBytes(this.take(this.len()).slice());
            case 0x29 /* ) */: return this.items(this.u8(), depth, slot);
            case 0x28 /* ( */: return this.items(this.len(), depth, slot);
            case 0x5b /* [ */: {
                const list = new PyList([]);
                if (slot >= 0) {
                    this.refs[slot] = list;
                }
                const n = this.len();
                for (let i = 0; i < n; i++) {
                    list.items.push(this.read(depth + 1));
                }
                return list;
            }
            case 0x7b /* { */: return this.dict(depth, slot);
            case 0x3c /* < */: case 0x3e /* > */: return new Set(this.items(this.len(), depth, -1));
            case 0x72 /* r */: {
                const index = this.len();
                if (index >= this.refs.length) {
                    throw new FileFormatError(`marshal back-reference ${index} points past the ${this.refs.length} values read`);
                }
                return this.refs[index];
            }
            case 0x30 /* 0 */: throw new FileFormatError('unexpected end marker in marshal data');
            case 0x63 /* c */: throw new FileFormatError('marshal data holds a code object: not a pstats file');
            default:
                throw new FileFormatError(`unknown marshal type 0x${type.toString(16)} at byte ${this.pos - 1}`, true);
        }
    }

    /** A tuple: a plain array, in its reference slot before its items are read. */
    private items(n: number, depth: number, slot: number): PyValue[] {
        if (n > this.data.length - this.pos) {
            throw new TruncatedError('marshal data');  // each item takes at least a byte
        }
        const out: PyValue[] = new Array(n);
        if (slot >= 0) {
            this.refs[slot] = out;
        }
        for (let i = 0; i < n; i++) {
            out[i] = this.read(depth + 1);
        }
        return out;
    }

    private dict(depth: number, slot: number): PyDict {
        const out = new PyDict();
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
            out.set(key, this.read(depth + 1));
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
        const at = this.need(n);
        return latin1(this.data, at, at + n);
    }

    private text(n: number): string {
        const at = this.need(n);
        for (let i = at; i < at + n; i++) {
            if (this.data[i] >= 0x80) {
                return utf8.decode(this.data.subarray(at, at + n));
            }
        }
        return latin1(this.data, at, at + n);
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
        const at = this.need(4);
        const d = this.data;
        return d[at] | (d[at + 1] << 8) | (d[at + 2] << 16) | (d[at + 3] << 24);
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

/** Bytes as Latin-1 text: a direct char-code copy, far cheaper than a TextDecoder call per short string. */
function latin1(data: Uint8Array, start: number, end: number): string {
    let out = '';
    if (end - start <= 24) {
        for (let i = start; i < end; i++) {
            out += String.fromCharCode(data[i]);
        }
        return out;
    }
    for (let i = start; i < end; i += 4096) {
        out += String.fromCharCode.apply(null, data.subarray(i, Math.min(end, i + 4096)) as unknown as number[]);
    }
    return out;
}
