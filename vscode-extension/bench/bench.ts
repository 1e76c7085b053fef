// Measures, side by side in one run, what an editor does before its page can draw:
//   - a 50,000-function .prof (target: under 1 s): tensor_dap's loader (read, parse marshal,
//     table, icicle) vs Python reading the same file (pstats.Stats; tensor_dap's exporter)
//   - a 100 MB torch.profiler trace (target: summary under 5 s): the streamed summary vs
//     reading the whole file and JSON.parse (what a naive viewer does, before any summary)
// Inputs come from bench/make_inputs.py (scripts/bench.sh runs it). Exits 1 if a target is missed.
import { execFileSync } from 'node:child_process';
import { readFileSync, statSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { loadProf, loadTrace } from '../src/editors/loaders';

const DIR = process.argv[2] ?? join(__dirname, '..', 'bench-inputs');  // out/bench-inputs
const PYTHON = process.env.PYTHON ?? 'python3';
const RUNS = 5;

function median(xs: number[]): number {
    const s = [...xs].sort((a, b) => a - b);
    return s[s.length >> 1];
}

async function time<T>(fn: () => Promise<T> | T): Promise<[number, T, number]> {
    const start = performance.now();
    const cpu = process.cpuUsage();
    const value = await fn();
    const used = process.cpuUsage(cpu);
    return [performance.now() - start, value, (used.user + used.system) / 1000];
}

function pythonSeconds(code: string): number {
    const out = execFileSync(PYTHON, ['-c', `import time, sys\nt = time.perf_counter()\n${code}\nprint(time.perf_counter() - t)`], { encoding: 'utf8', maxBuffer: 1 << 30 });
    return Number(out.trim().split('\n').pop()) * 1000;
}

function row(label: string, ms: number, base?: number, cpuMs?: number): string {
    return `  ${label.padEnd(58)} ${ms.toFixed(0).padStart(7)} ms${base ? `  ${(ms / base).toFixed(2).padStart(6)}×` : ''}${cpuMs !== undefined ? `  (CPU ${cpuMs.toFixed(0)} ms)` : ''}`;
}

async function main(): Promise<void> {
    const prof = join(DIR, 'big.prof');
    const trace = join(DIR, 'big.pt.trace.json');
    let ok = true;
    console.log(`load average ${loadavg().map((l) => l.toFixed(1)).join(' ')} on this machine: wall times stretch when other processes compete for the cores; CPU times do not\n`);

    const profTimes: number[] = [];
    const profCpu: number[] = [];
    let functions = 0, payload = 0;
    for (let i = 0; i < RUNS; i++) {
        const [ms, { message }, cpuMs] = await time(() => loadProf(prof));
        profCpu.push(cpuMs);
        if (message.type !== 'prof') {
            throw new Error(`the .prof did not load: ${JSON.stringify(message).slice(0, 300)}`);
        }
        profTimes.push(ms);
        functions = message.table.name.length;
        if (i === 0) {
            const [jsonMs, text] = await time(() => JSON.stringify(message));
            payload = text.length;
            console.log(`.prof: ${functions.toLocaleString('en-US')} functions, ${(statSync(prof).size / 2 ** 20).toFixed(1)} MiB; message to the page ${(payload / 2 ** 20).toFixed(1)} MiB (serialised in ${jsonMs.toFixed(0)} ms)`);
        }
    }
    const ours = median(profTimes);
    const [pyStats, pyExport] = [
        pythonSeconds(`import pstats; pstats.Stats(${JSON.stringify(prof)})`),
        pythonSeconds(`import subprocess; subprocess.run([sys.executable, '-m', 'tensor_dap.profiling.export', ${JSON.stringify(prof)}], stdout=subprocess.DEVNULL, check=True)`),
    ];
    console.log(row(`tensor_dap loader (median of ${RUNS}, first ${profTimes[0].toFixed(0)} ms)`, ours, ours, median(profCpu)));
    console.log(row('python: pstats.Stats(file) (read only, in-process)', pyStats, ours));
    console.log(row('python -m tensor_dap.profiling.export (process + JSON)', pyExport, ours));
    const profOk = ours < 1000;
    ok &&= profOk;
    console.log(`  target: open in under 1 s -> ${profOk ? 'PASS' : 'FAIL'} (${ours.toFixed(0)} ms)\n`);

    const size = statSync(trace).size;
    const [streamMs, message, streamCpu] = await time(() => loadTrace(trace));
    if (message.type !== 'trace') {
        throw new Error(`the trace did not load: ${JSON.stringify(message).slice(0, 300)}`);
    }
    const rssAfterStream = process.memoryUsage().rss;
    const [naiveMs, events, naiveCpu] = await time(() => (JSON.parse(readFileSync(trace, 'utf8')) as { traceEvents: unknown[] }).traceEvents.length);
    const rssAfterNaive = process.memoryUsage().rss;
    console.log(`trace: ${(size / 2 ** 20).toFixed(0)} MiB, ${message.summary.events.toLocaleString('en-US')} events (JSON.parse counts ${events.toLocaleString('en-US')}); summary sent to the page ${(JSON.stringify(message).length / 1024).toFixed(0)} KiB`);
    console.log(row('tensor_dap streamed summary (ops, self times, timeline)', streamMs, streamMs, streamCpu));
    console.log(row('readFile + JSON.parse of the whole file (no summary yet)', naiveMs, streamMs, naiveCpu));
    console.log(`  resident memory: ${(rssAfterStream / 2 ** 20).toFixed(0)} MiB after streaming, ${(rssAfterNaive / 2 ** 20).toFixed(0)} MiB after JSON.parse`);
    const traceOk = streamMs < 5000;
    ok &&= traceOk;
    console.log(`  target: summary in under 5 s -> ${traceOk ? 'PASS' : 'FAIL'} (${(streamMs / 1000).toFixed(2)} s)`);
    process.exitCode = ok ? 0 : 1;
}

main().catch((e) => {
    console.error(e);
    process.exitCode = 2;
});
