/**
 * Reads a Chrome trace file (plain or gzip, told apart by its first bytes) as a stream and
 * returns its summary; the file is never held in memory whole.
 */
import * as fs from 'fs';
import * as zlib from 'zlib';
import { FileFormatError } from './errors';
import { TraceEventStream } from './jsonEvents';
import { TraceAggregator, TraceSummary } from './trace';

export async function summarizeTraceFile(path: string, signal?: AbortSignal): Promise<TraceSummary> {
    const gzip = await startsWithGzipMagic(path);
    const aggregator = new TraceAggregator();
    const stream = new TraceEventStream((e) => aggregator.add(e));
    const decoder = new TextDecoder('utf-8');
    const file = fs.createReadStream(path, { highWaterMark: 1 << 20, signal });
    const source: NodeJS.ReadableStream = gzip ? file.pipe(zlib.createGunzip()) : file;
    try {
        for await (const chunk of source) {
            stream.push(decoder.decode(chunk as Buffer, { stream: true }));
        }
    } catch (e) {
        if (e instanceof FileFormatError || (e as Error).name === 'AbortError') {
            throw e;
        }
        const code = (e as NodeJS.ErrnoException).code;
        if (code === 'Z_BUF_ERROR' || code === 'Z_DATA_ERROR') {
            throw new FileFormatError(`the gzip stream is ${code === 'Z_BUF_ERROR' ? 'truncated' : 'corrupt'}`);
        }
        throw e;
    } finally {
        file.destroy();
    }
    stream.push(decoder.decode());
    stream.end();
    return aggregator.finish(stream.metadata);
}

async function startsWithGzipMagic(path: string): Promise<boolean> {
    const handle = await fs.promises.open(path, 'r');
    try {
        const head = Buffer.alloc(2);
        const { bytesRead } = await handle.read(head, 0, 2, 0);
        return bytesRead === 2 && head[0] === 0x1f && head[1] === 0x8b;
    } finally {
        await handle.close();
    }
}
