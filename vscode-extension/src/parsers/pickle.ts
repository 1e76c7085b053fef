/**
 * A data-only reader for Python pickles (protocols 0-5). It builds plain values and never runs
 * anything: a pickle names classes and callables by module and name, and only the names the
 * caller allows are accepted (each becomes a `PyObject` recording the name and its state);
 * any other name is refused. Enough for line_profiler's `.lprof` files.
 */
import { FileFormatError, TruncatedError } from './errors';
import { PyBytes, PyDict, PyList, PyValue } from './marshal';

export class PyObject {
    state: PickleValue = null;
    constructor(readonly cls: string) {}
}
/** A class or callable the pickle named and the caller allowed. */
export class PyGlobal {
    constructor(readonly name: string) {}
}
/** As in marshal.ts: a tuple is a plain array, a list a PyList. */
export type PickleValue = PyValue | PyObject | PyGlobal | PickleValue[];

const MARK = Symbol('mark');
type StackItem = PickleValue | typeof MARK;

/** `allowed`: "module.name" strings; `copyreg._reconstructor` and `builtins.object` are implied. */
export function loadPickle(data: Uint8Array, allowed: ReadonlySet<string>): PickleValue {
    return new Unpickler(data, allowed).load();
}

const RECONSTRUCTOR = new Set(['copyreg._reconstructor', 'copy_reg._reconstructor']);
const OBJECT = new Set(['builtins.object', '__builtin__.object']);

class Unpickler {
    private pos = 0;
    private stack: StackItem[] = [];
    private readonly marks: number[] = [];
    private readonly memo = new Map<number, PickleValue>();
    private readonly view: DataView;
    private readonly utf8 = new TextDecoder('utf-8');
    private readonly latin1 = new TextDecoder('latin1');

    constructor(private readonly data: Uint8Array, private readonly allowed: ReadonlySet<string>) {
        this.view = new DataView(data.buffer, data.byteOffset, data.byteLength);
    }

    load(): PickleValue {
        for (;;) {
            const at = this.pos;
            const op = this.u8();
            switch (op) {
                case 0x80: this.u8(); break;                               // PROTO
                case 0x95: this.need(8); break;                            // FRAME: a length hint
                case 0x2e: return this.pop();                              // STOP '.'
                case 0x28: this.marks.push(this.stack.length); this.stack.push(MARK); break;  // MARK '('
                case 0x30: this.pop(); break;                              // POP '0'
                case 0x31: this.popMark(); break;                          // POP_MARK '1'
                case 0x32: this.push(this.top()); break;                   // DUP '2'
                case 0x4e: this.push(null); break;                         // NONE 'N'
                case 0x88: this.push(true); break;                         // NEWTRUE
                case 0x89: this.push(false); break;                        // NEWFALSE
                case 0x4b: this.push(this.u8()); break;                    // BININT1 'K'
                case 0x4d: this.push(this.view.getUint16(this.need(2), true)); break;  // BININT2 'M'
                case 0x4a: this.push(this.view.getInt32(this.need(4), true)); break;   // BININT 'J'
                case 0x8a: this.push(this.long(this.u8())); break;         // LONG1
                case 0x8b: this.push(this.long(this.len32())); break;      // LONG4
                case 0x47: this.push(this.view.getFloat64(this.need(8), false)); break;  // BINFLOAT 'G' (big-endian)
                case 0x49: this.push(this.textInt(this.line())); break;    // INT 'I'
                case 0x4c: this.push(this.textInt(this.line().replace(/L$/, ''))); break;  // LONG 'L'
                case 0x46: this.push(Number(this.line())); break;          // FLOAT 'F'
                case 0x8c: this.push(this.utf8.decode(this.take(this.u8()))); break;       // SHORT_BINUNICODE
                case 0x58: this.push(this.utf8.decode(this.take(this.len32()))); break;    // BINUNICODE 'X'
                case 0x8d: this.push(this.utf8.decode(this.take(this.len64()))); break;    // BINUNICODE8
                case 0x56: this.push(rawUnicodeEscape(this.line())); break;                // UNICODE 'V'
                case 0x55: this.push(this.latin1.decode(this.take(this.u8()))); break;     // SHORT_BINSTRING 'U'
                case 0x54: this.push(this.latin1.decode(this.take(this.len32()))); break;  // BINSTRING 'T'
                case 0x43: this.push(new PyBytes(this.take(this.u8()).slice())); break;    // SHORT_BINBYTES 'C'
                case 0x42: this.push(new PyBytes(this.take(this.len32()).slice())); break; // BINBYTES 'B'
                case 0x8e: this.push(new PyBytes(this.take(this.len64()).slice())); break; // BINBYTES8
                case 0x29: this.push([]); break;                           // EMPTY_TUPLE ')'
                case 0x85: this.push(tuple(this.popN(1))); break;          // TUPLE1
                case 0x86: this.push(tuple(this.popN(2))); break;          // TUPLE2
                case 0x87: this.push(tuple(this.popN(3))); break;          // TUPLE3
                case 0x74: this.push(tuple(this.popMark())); break;        // TUPLE 't'
                case 0x5d: this.push(new PyList([])); break;               // EMPTY_LIST ']'
                case 0x6c: this.push(new PyList(this.popMark() as PyValue[])); break;  // LIST 'l'
                case 0x61: { const v = this.pop(); this.list().push(v as PyValue); break; }  // APPEND 'a'
                case 0x65: { const items = this.popMark(); const list = this.list(); for (const i of items) { list.push(i as PyValue); } break; }  // APPENDS 'e'
                case 0x7d: this.push(new PyDict()); break;                 // EMPTY_DICT '}'
                case 0x64: this.push(dictOf(this.popMark())); break;       // DICT 'd'
                case 0x73: { const v = this.pop(); const k = this.pop(); this.dict().set(k as PyValue, v as PyValue); break; }  // SETITEM 's'
                case 0x75: { const items = this.popMark(); const d = this.dict(); const add = dictOf(items); add.keys.forEach((k, i) => d.set(k, add.values[i])); break; }  // SETITEMS 'u'
                case 0x8f: this.push(new Set()); break;                    // EMPTY_SET
                case 0x90: { const items = this.popMark(); const s = this.top(); if (!(s instanceof Set)) { throw this.bad('ADDITEMS without a set'); } items.forEach((i) => s.add(i as PyValue)); break; }
                case 0x91: this.push(new Set(this.popMark() as PyValue[])); break;  // FROZENSET
                case 0x94: this.memo.set(this.memo.size, this.top()); break;        // MEMOIZE
                case 0x70: this.memo.set(this.textInt(this.line()) as number, this.top()); break;  // PUT 'p'
                case 0x71: this.memo.set(this.u8(), this.top()); break;             // BINPUT 'q'
                case 0x72: this.memo.set(this.len32(), this.top()); break;          // LONG_BINPUT 'r'
                case 0x67: this.push(this.get(this.textInt(this.line()) as number)); break;  // GET 'g'
                case 0x68: this.push(this.get(this.u8())); break;                   // BINGET 'h'
                case 0x6a: this.push(this.get(this.len32())); break;                // LONG_BINGET 'j'
                case 0x63: {                                                        // GLOBAL 'c'
                    const module = this.line();
                    this.push(this.global(module, this.line()));
                    break;
                }
                case 0x93: {                                                        // STACK_GLOBAL
                    const name = this.pop();
                    const module = this.pop();
                    this.push(this.global(String(module), String(name)));
                    break;
                }
                case 0x81: { this.pop(); this.push(this.instance(this.pop())); break; }  // NEWOBJ (cls, args)
                case 0x92: { this.pop(); this.pop(); this.push(this.instance(this.pop())); break; }  // NEWOBJ_EX
                case 0x52: this.reduce(); break;                                          // REDUCE 'R'
                case 0x62: {                                                              // BUILD 'b'
                    const state = this.pop();
                    const obj = this.top();
                    if (!(obj instanceof PyObject)) {
                        throw this.bad('BUILD on something that is not an object');
                    }
                    obj.state = state;
                    break;
                }
                default:
                    throw new FileFormatError(
                        `unsupported pickle opcode 0x${op.toString(16)} at byte ${at}`, true);
            }
        }
    }

    private global(module: string, name: string): PyGlobal {
        const full = `${module}.${name}`;
        if (this.allowed.has(full) || RECONSTRUCTOR.has(full) || OBJECT.has(full)) {
            return new PyGlobal(full);
        }
        throw new FileFormatError(`refusing to read a pickle that names ${full}: only line_profiler's LineStats is expected here`);
    }

    private instance(cls: StackItem): PyObject {
        if (!(cls instanceof PyGlobal) || RECONSTRUCTOR.has(cls.name)) {
            throw this.bad('an object of an unknown class');
        }
        return new PyObject(cls.name);
    }

    /** Only copyreg._reconstructor(cls, object, None) and cls() are accepted: they create, never run. */
    private reduce(): void {
        const args = this.pop();
        const fn = this.pop();
        if (fn instanceof PyGlobal && RECONSTRUCTOR.has(fn.name) && Array.isArray(args) && args.length >= 1) {
            this.push(this.instance(args[0] as PickleValue));
        } else if (fn instanceof PyGlobal && !OBJECT.has(fn.name) && Array.isArray(args) && args.length === 0) {
            this.push(this.instance(fn));
        } else {
            throw this.bad('a call the reader does not allow');
        }
    }

    private get(index: number): PickleValue {
        if (!this.memo.has(index)) {
            throw this.bad(`a memo reference (${index}) to nothing`);
        }
        return this.memo.get(index) as PickleValue;
    }

    private list(): PyValue[] {
        const top = this.top();
        if (!(top instanceof PyList)) {
            throw this.bad('APPEND to something that is not a list');
        }
        return top.items;
    }

    private dict(): PyDict {
        const top = this.top();
        if (!(top instanceof PyDict)) {
            throw this.bad('SETITEM on something that is not a dict');
        }
        return top;
    }

    private push(v: PickleValue): void {
        this.stack.push(v);
    }

    private top(): PickleValue {
        const v = this.stack[this.stack.length - 1];
        if (v === undefined || v === MARK) {
            throw this.bad('an empty stack');
        }
        return v;
    }

    private pop(): PickleValue {
        const v = this.top();
        this.stack.pop();
        return v;
    }

    private popN(n: number): PickleValue[] {
        const out: PickleValue[] = [];
        for (let i = 0; i < n; i++) {
            out.unshift(this.pop());
        }
        return out;
    }

    private popMark(): PickleValue[] {
        const mark = this.marks.pop();
        if (mark === undefined) {
            throw this.bad('a missing MARK');
        }
        const items = this.stack.splice(mark) as PickleValue[];
        items.shift();  // the MARK itself
        return items;
    }

    private long(n: number): number | bigint {
        const bytes = this.take(n);
        let v = 0n;
        for (let i = n - 1; i >= 0; i--) {
            v = (v << 8n) | BigInt(bytes[i]);
        }
        if (n > 0 && bytes[n - 1] & 0x80) {
            v -= 1n << BigInt(8 * n);
        }
        return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
    }

    private textInt(s: string): number | boolean {
        if (s === '01') { return true; }
        if (s === '00') { return false; }
        const v = Number(s);
        if (!Number.isInteger(v)) {
            throw this.bad(`an integer written as ${JSON.stringify(s.slice(0, 20))}`);
        }
        return v;
    }

    private line(): string {
        const end = this.data.indexOf(0x0a, this.pos);
        if (end < 0) {
            throw new TruncatedError('pickle data');
        }
        const s = this.latin1.decode(this.data.subarray(this.pos, end));
        this.pos = end + 1;
        return s;
    }

    private u8(): number {
        return this.data[this.need(1)];
    }

    private len32(): number {
        const n = this.view.getInt32(this.need(4), true);
        if (n < 0) {
            throw this.bad('a negative length');
        }
        return n;
    }

    private len64(): number {
        const at = this.need(8);
        const n = this.view.getUint32(at, true) + this.view.getUint32(at + 4, true) * 2 ** 32;
        return n;
    }

    private take(n: number): Uint8Array {
        const at = this.need(n);
        return this.data.subarray(at, at + n);
    }

    private need(n: number): number {
        if (this.pos + n > this.data.length) {
            throw new TruncatedError('pickle data');
        }
        const at = this.pos;
        this.pos += n;
        return at;
    }

    private bad(what: string): FileFormatError {
        return new FileFormatError(`malformed pickle: ${what} at byte ${this.pos}`);
    }
}

function tuple(items: PickleValue[]): PyValue[] {
    return items as PyValue[];
}

function dictOf(items: PickleValue[]): PyDict {
    if (items.length % 2) {
        throw new FileFormatError('malformed pickle: a dict with an odd number of items');
    }
    const d = new PyDict();
    for (let i = 0; i < items.length; i += 2) {
        d.set(items[i] as PyValue, items[i + 1] as PyValue);
    }
    return d;
}

function rawUnicodeEscape(s: string): string {
    return s.replace(/\\u([0-9a-fA-F]{4})|\\U([0-9a-fA-F]{8})/g, (_m, a: string, b: string) =>
        String.fromCodePoint(parseInt(a ?? b, 16)));
}
