// The torch.profiler trace summary on a real trace (`tensor-dap profile --mode torch`), checked against torch's own key_averages,
// streamed in chunks of every size, gzip or not, and on broken input.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { FileFormatError, TruncatedError } from '../src/parsers/errors';
import { TraceEventStream } from '../src/parsers/jsonEvents';
import { TraceAggregator, TraceSummary } from '../src/parsers/trace';
import { summarizeTraceFile } from '../src/parsers/traceFile';
import { fixture, json, text } from './_fixtures';

function summarize(doc: string, chunk = doc.length): TraceSummary {
    const agg = new TraceAggregator();
    const stream = new TraceEventStream((e) => agg.add(e));
    for (let i = 0; i < doc.length; i += chunk) {
        stream.push(doc.slice(i, i + chunk));
    }
    stream.end();
    return agg.finish(stream.metadata);
}

test('trace: op counts and self CPU time agree with torch.profiler key_averages', async () => {
    // train.pt.trace.json is what `tensor-dap profile --mode torch` wrote (steps 4-6 of
    // train_small.py, with_stack); train.ops.json the key_averages() of that same profiler.
    const s = await summarizeTraceFile(fixture('train.pt.trace.json'));
    const torchOps = json<Record<string, { count: number; self_cpu: number; cpu: number }>>('train.ops.json');
    const events = (JSON.parse(text('train.pt.trace.json')).traceEvents as { ph?: string; name: string; cat?: string; ts: number; dur: number }[])
        .filter((e) => e.ph === 'X');
    const cats = new Map<string, Set<string>>();
    for (const e of events) {
        cats.set(e.name, (cats.get(e.name) ?? new Set()).add(e.cat ?? ''));
    }
    // The window closes inside the last optimizer.step() (it counts the steps), so the trace
    // ends that range when the profiler stopped, later than key_averages does: of such ranges
    // only the calls are compared.
    const lastStepEnd = Math.max(...events.filter((e) => e.name.startsWith('ProfilerStep#')).map((e) => e.ts + e.dur));
    const openAtStop = new Set(events.filter((e) => e.ts + e.dur > lastStepEnd && (e.cat === 'cpu_op' || e.cat === 'user_annotation')).map((e) => e.name));
    assert.deepEqual([...openAtStop], ['Optimizer.step#SGD.step']);
    const ours = new Map(s.ops.map((o) => [o.name, o]));
    let compared = 0;
    let pythonFrames = 0;
    for (const [name, t] of Object.entries(torchOps)) {
        if (name === 'ProfilerStep*') {  // torch merges the step ranges into one key
            const steps = s.ops.filter((o) => o.name.startsWith('ProfilerStep#'));
            assert.equal(steps.length, 3, 'the three active steps of the window');
            assert.equal(steps.reduce((n, o) => n + o.calls, 0), t.count);
            continue;
        }
        if ([...(cats.get(name) ?? [])].every((c) => c === 'python_function')) {  // a Python frame (with_stack), not an operator
            assert.ok(cats.has(name), `${name} is in the trace`);
            assert.equal(ours.get(name), undefined, `${name} is not listed as an operator`);
            pythonFrames++;
            continue;
        }
        const o = ours.get(name);
        assert.ok(o, `${name} is in the summary`);
        assert.equal(o.calls, t.count, `${name} calls`);
        if (openAtStop.has(name)) {
            continue;
        }
        assert.ok(Math.abs(o.totalCpu - t.cpu) <= 0.01 * t.cpu + 2, `${name} total CPU ${o.totalCpu} vs torch ${t.cpu}`);
        assert.ok(Math.abs(o.selfCpu - t.self_cpu) <= 0.05 * t.cpu + 2, `${name} self CPU ${o.selfCpu} vs torch ${t.self_cpu}`);
        compared++;
    }
    assert.ok(compared > 20 && pythonFrames > 10, `${compared} operators, ${pythonFrames} Python frames`);
    const addmm = ours.get('aten::addmm')!;
    assert.equal(addmm.calls, 6);
    assert.deepEqual(addmm.shapes.map(([s, n]) => [s, n]).sort(), [['[[32],[8,16],[16,32],[],[]]', 3], ['[[4],[8,32],[32,4],[],[]]', 3]]);
    assert.equal(s.hasCuda, false);
    assert.ok(s.timeline.length > 0 && s.timeline.every((e) => e.dur >= 0 && e.start >= 0 && e.lane < s.lanes.length));
    assert.ok(s.lanes.some((l) => l.startsWith('python')), s.lanes.join(','));
    assert.equal(s.metadata.schemaVersion, 1);
    assert.deepEqual(s.metadata.deviceProperties, []);
});

test('trace: any chunking gives the same summary, and gzip the same as plain', async () => {
    const doc = text('train.pt.trace.json');
    const whole = summarize(doc);
    for (const chunk of [1, 7, 64, 4093]) {
        assert.deepEqual(summarize(doc, chunk), whole, `chunks of ${chunk}`);
    }
    assert.deepEqual(await summarizeTraceFile(fixture('train.pt.trace.json.gz')), whole);
    assert.deepEqual(summarize(JSON.stringify(JSON.parse(doc).traceEvents)).ops, whole.ops, 'the bare-array form');
});

test('trace: kernels are charged to the operator that launched them (External id)', () => {
    const ev = (o: object) => JSON.stringify({ ph: 'X', pid: 1, tid: 1, ...o });
    const doc = `{"traceEvents": [
        ${ev({ cat: 'cpu_op', name: 'aten::mm', ts: 0, dur: 10, args: { 'External id': 7, 'Input Dims': [[2, 3], [3, 4]] } })},
        ${ev({ cat: 'cpu_op', name: 'aten::empty', ts: 1, dur: 2, args: { 'External id': 8 } })},
        ${ev({ cat: 'cuda_runtime', name: 'cudaLaunchKernel', ts: 4, dur: 3, args: { 'External id': 7, correlation: 99 } })},
        ${ev({ cat: 'kernel', name: 'sgemm', pid: 0, tid: 7, ts: 12, dur: 40, args: { 'External id': 7, correlation: 99 } })},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}}
    ], "displayTimeUnit": "ms"}`;
    const s = summarize(doc);
    const mm = s.ops.find((o) => o.name === 'aten::mm')!;
    assert.equal(mm.selfCuda, 40);
    assert.equal(mm.selfCpu, 8);
    assert.equal(s.hasCuda, true);
    assert.equal(s.ops[0].name, 'aten::mm');
    assert.ok(s.lanes.includes('process 0 · stream 7'));
    assert.equal(s.spanUs, 52);
});

test('trace: Python frames (with_stack) nest like torch\'s key_averages: a range\'s self time leaves out its Python', () => {
    // The optimizer's range runs its Python frame, which runs an op; an op right in the range; a frame that starts
    // inside the range and ends after it (the profiler's own exit) is not its child, in torch either.
    const ev = (o: object) => JSON.stringify({ ph: 'X', pid: 1, tid: 1, ...o });
    const doc = `{"traceEvents": [
        ${ev({ cat: 'user_annotation', name: 'Optimizer.step#SGD.step', ts: 0, dur: 100 })},
        ${ev({ cat: 'python_function', name: 'torch/optim/sgd.py(340): _single_tensor_sgd', ts: 10, dur: 80 })},
        ${ev({ cat: 'cpu_op', name: 'aten::add_', ts: 20, dur: 30 })},
        ${ev({ cat: 'cpu_op', name: 'aten::mul', ts: 92, dur: 3 })},
        ${ev({ cat: 'python_function', name: 'torch/autograd/profiler.py(932): __exit__', ts: 97, dur: 10 })},
        ${ev({ cat: 'cpu_op', name: 'aten::zero_', tid: 2, ts: 12, dur: 50 })}
    ]}`;
    const s = summarize(doc);
    const row = (name: string) => s.ops.find((o) => o.name === name)!;
    assert.equal(row('Optimizer.step#SGD.step').selfCpu, 100 - 80 - 3);
    assert.equal(row('Optimizer.step#SGD.step').totalCpu, 100);
    assert.equal(row('aten::add_').selfCpu, 30);
    assert.equal(row('aten::mul').selfCpu, 3);
    assert.equal(row('aten::zero_').selfCpu, 50);  // another thread: nothing nests across lanes
    assert.deepEqual(s.ops.map((o) => o.name).sort(), ['Optimizer.step#SGD.step', 'aten::add_', 'aten::mul', 'aten::zero_']);
});

test('trace: strings with escaped quotes, brackets and braces do not confuse the stream', () => {
    const name = 'weird \\"}]{[ name\\\\';
    const doc = `{"meta": "x\\"}", "traceEvents": [{"ph": "X", "name": "${name}", "ts": 1, "dur": 2, "pid": 1, "tid": 1}], "n": 3}`;
    for (const chunk of [1, 2, 3, 1000]) {
        const s = summarize(doc, chunk);
        assert.equal(s.ops[0].name, 'weird "}]{[ name\\', `chunks of ${chunk}`);
    }
});

test('trace: truncated, corrupt and foreign files are FileFormatErrors', async () => {
    const doc = text('train.pt.trace.json');
    for (const cut of [0, 1, 100, doc.length >> 1, doc.length - 3]) {
        assert.throws(() => summarize(doc.slice(0, cut)), FileFormatError, `cut at ${cut}`);
    }
    assert.throws(() => summarize(doc.slice(0, 5000)), TruncatedError);
    assert.throws(() => summarize('hello'), /not a Chrome trace/);
    assert.throws(() => summarize('{"traceEvents": [{"ph": "X", oops}]}'), /invalid JSON/);
    const dir = mkdtempSync(join(tmpdir(), 'tdap-trace-'));
    const gz = await import('node:fs').then((fs) => fs.readFileSync(fixture('train.pt.trace.json.gz')));
    writeFileSync(join(dir, 'cut.json.gz'), gz.subarray(0, gz.length >> 1));
    await assert.rejects(summarizeTraceFile(join(dir, 'cut.json.gz')), FileFormatError);
    const bad = Buffer.from(gz);
    bad.fill(0x41, 20, 60);
    writeFileSync(join(dir, 'bad.json.gz'), bad);
    await assert.rejects(summarizeTraceFile(join(dir, 'bad.json.gz')), FileFormatError);
    rmSync(dir, { recursive: true, force: true });
});
