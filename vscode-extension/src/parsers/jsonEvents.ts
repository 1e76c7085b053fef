/**
 * Streams the events out of a Chrome trace without parsing the whole document: text goes in
 * chunk by chunk, and each element of the top-level `traceEvents` array (or of a top-level
 * array, the format's other form) comes out as its own parsed object. Other top-level members
 * (`deviceProperties`, `schemaVersion`, ...) are parsed and kept in `metadata` (those over
 * 1 MiB are dropped). Memory stays bounded by the chunk size, whatever the file size.
 *
 * Speed: between events, the run of complete events up to the last "}," of the chunk is handed
 * to JSON.parse in one piece (V8's parser is many times faster than a character loop in JS).
 * Only a parse that succeeds is used, and it can only succeed when that "}," really ends an
 * event of the array (inside a string or a nested value the batch would not be balanced);
 * otherwise the character scanner below, which tracks strings and nesting exactly, takes over
 * until the next event boundary.
 */
import { FileFormatError, TruncatedError } from './errors';

const MAX_ELEMENT_CHARS = 64 * 1024 * 1024;  // one event larger than this: not a trace
const MAX_META_CHARS = 1024 * 1024;

const QUOTE = 0x22, LBRACE = 0x7b, RBRACE = 0x7d, LBRACKET = 0x5b, RBRACKET = 0x5d, COLON = 0x3a, COMMA = 0x2c;

export class TraceEventStream {
    readonly metadata: Record<string, unknown> = {};
    private buf = '';
    private pos = 0;
    private depth = 0;
    private inString = false;
    private escaped = false;
    private started = false;
    private done = false;
    private topIsArray = false;
    private eventsDepth = -1;     // depth inside the array whose elements are events
    private afterColon = false;   // top-level object: between a key's ':' and the next ','
    private key = '';
    private keyStart = -1;        // offsets into buf of what is being collected
    private valueStart = -1;
    private elementStart = -1;
    private count = 0;
    private sawEvents = false;

    constructor(private readonly onEvent: (event: Record<string, unknown>) => void) {}

    get events(): number {
        return this.count;
    }

    push(text: string): void {
        if (this.done) {
            if (/\S/.test(text)) {
                throw new FileFormatError('text after the end of the JSON document');
            }
            return;
        }
        this.buf += text;
        this.scan();
        this.compact();
    }

    end(): void {
        if (!this.done) {
            throw new TruncatedError(this.started ? 'the trace JSON' : 'the trace (it is empty)');
        }
        if (!this.topIsArray && !this.sawEvents) {
            throw new FileFormatError('not a Chrome trace: the JSON object has no "traceEvents" list');
        }
    }

    private scan(): void {
        const buf = this.buf;
        const n = buf.length;
        let i = this.pos;
        let batches = 2;  // tries per chunk; a batch that fails to parse is left to the scanner
        while (i < n) {
            if (batches > 0 && !this.inString && this.elementStart < 0 && this.depth === this.eventsDepth) {
                batches--;
                const end = this.batch(buf, i);
                if (end > i) {
                    i = end;
                    continue;
                }
            }
            if (this.inString) {
                if (this.escaped) {
                    this.escaped = false;
                    i++;
                    continue;
                }
                // Jump to the next quote: most of a trace is string content.
                const q = buf.indexOf('"', i);
                if (q < 0) {
                    const b = buf.lastIndexOf('\\');
                    this.escaped = b === n - 1 && trailingBackslashes(buf, n) % 2 === 1;
                    i = n;
                    break;
                }
                if (trailingBackslashes(buf, q) % 2 === 1) {
                    i = q + 1;  // an escaped quote
                    continue;
                }
                this.inString = false;
                i = q + 1;
                if (this.keyStart >= 0) {
                    this.key = JSON.parse(buf.slice(this.keyStart, i)) as string;
                    this.keyStart = -1;
                }
                continue;
            }
            const c = buf.charCodeAt(i);
            if (c <= 0x20) {
                i++;
                continue;
            }
            if (!this.started) {
                if (c !== LBRACE && c !== LBRACKET) {
                    throw new FileFormatError('not a Chrome trace (it does not start with { or [)');
                }
                this.started = true;
                this.topIsArray = c === LBRACKET;
                this.eventsDepth = this.topIsArray ? 1 : -1;
                this.depth = 1;
                i++;
                continue;
            }
            const topMember = this.depth === 1 && !this.topIsArray;
            if (c === QUOTE) {
                this.inString = true;
                if (topMember) {
                    if (!this.afterColon) {
                        this.keyStart = i;
                    } else if (this.valueStart < 0) {
                        this.valueStart = i;
                    }
                }
            } else if (c === LBRACE || c === LBRACKET) {
                if (topMember && this.afterColon && this.valueStart < 0) {
                    if (this.key === 'traceEvents' && c === LBRACKET) {
                        this.eventsDepth = 2;
                        this.sawEvents = true;
                    } else {
                        this.valueStart = i;
                    }
                } else if (this.depth === this.eventsDepth && this.elementStart < 0 && c === LBRACE) {
                    this.elementStart = i;
                }
                this.depth++;
            } else if (c === RBRACE || c === RBRACKET) {
                this.depth--;
                if (this.elementStart >= 0 && this.depth === this.eventsDepth) {
                    this.event(buf.slice(this.elementStart, i + 1));
                    this.elementStart = -1;
                } else if (this.depth === 1 && this.eventsDepth === 2) {
                    this.eventsDepth = -1;  // the end of traceEvents
                } else if (this.depth === 0) {
                    if (this.valueStart >= 0) {
                        this.member(buf.slice(this.valueStart, i));
                    }
                    this.done = true;
                    if (/\S/.test(buf.slice(i + 1))) {
                        throw new FileFormatError('text after the end of the JSON document');
                    }
                    i = n;
                    break;
                } else if (this.depth < 0) {
                    throw new FileFormatError('unbalanced brackets in the trace JSON');
                }
            } else if (topMember && c === COLON) {
                this.afterColon = true;
            } else if (topMember && c === COMMA) {
                if (this.valueStart >= 0) {
                    this.member(buf.slice(this.valueStart, i));
                }
                this.afterColon = false;
            } else if (topMember && this.afterColon && this.valueStart < 0) {
                this.valueStart = i;  // a number, true, false or null
            }
            i++;
        }
        this.pos = i;
    }

    /** Parses the complete events from `from` to the chunk's last "}," in one go; returns where it stopped. */
    private batch(buf: string, from: number): number {
        let start = from;
        while (start < buf.length && (buf.charCodeAt(start) <= 0x20 || buf.charCodeAt(start) === COMMA)) {
            start++;
        }
        if (buf.charCodeAt(start) !== LBRACE) {
            return from;
        }
        const sep = buf.lastIndexOf('},');
        if (sep < start) {
            return from;
        }
        let values: unknown[];
        try {
            values = JSON.parse(`[${buf.slice(start, sep + 1)}]`) as unknown[];
        } catch {
            return from;
        }
        for (const value of values) {
            if (value && typeof value === 'object' && !Array.isArray(value)) {
                this.count++;
                this.onEvent(value as Record<string, unknown>);
            }
        }
        return sep + 1;
    }

    /** Drops the text nothing still needs, keeping the start of anything half read. */
    private compact(): void {
        const starts = [this.keyStart, this.valueStart, this.elementStart].filter((s) => s >= 0);
        const keep = starts.length ? Math.min(...starts) : this.pos;
        if (this.pos - keep > MAX_ELEMENT_CHARS || this.buf.length - keep > MAX_ELEMENT_CHARS) {
            throw new FileFormatError('a single trace event is larger than 64 MiB: not a Chrome trace');
        }
        if (keep > 0) {
            this.buf = this.buf.slice(keep);
            this.pos -= keep;
            if (this.keyStart >= 0) { this.keyStart -= keep; }
            if (this.valueStart >= 0) { this.valueStart -= keep; }
            if (this.elementStart >= 0) { this.elementStart -= keep; }
        }
    }

    private member(text: string): void {
        this.valueStart = -1;
        if (text.length > MAX_META_CHARS) {
            return;
        }
        this.metadata[this.key] = parse(text.trim());
    }

    private event(text: string): void {
        const value = parse(text);
        if (value && typeof value === 'object' && !Array.isArray(value)) {
            this.count++;
            this.onEvent(value as Record<string, unknown>);
        }
    }
}

function parse(text: string): unknown {
    try {
        return JSON.parse(text);
    } catch (e) {
        throw new FileFormatError(`invalid JSON in the trace: ${(e as Error).message}`);
    }
}

function trailingBackslashes(s: string, end: number): number {
    let k = 0;
    while (end - k - 1 >= 0 && s.charCodeAt(end - k - 1) === 0x5c) {
        k++;
    }
    return k;
}
