// The pstats and line_profiler readers on real files, compared with the Python reference
// reader (python -m tensor_dap.profiling.export) and on broken and hostile inputs.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FileFormatError, TruncatedError } from '../src/parsers/errors';
import { parseLprof } from '../src/parsers/lprof';
import { parsePstats } from '../src/parsers/pstats';
import { bytes, fixture, json } from './_fixtures';
import { existsSync } from 'node:fs';
import { join, dirname } from 'node:path';

test('pstats: a real cProfile file reads exactly as the Python exporter reads it', () => {
    const model = parsePstats(bytes('train.prof'));
    const reference = json('export/train.prof.json');
    assert.deepEqual(model, reference);
    assert.ok(model.functions.length > 1000, `only ${model.functions.length} functions`);
    const step = model.functions.find((f) => f.name === 'train_step');
    assert.ok(step, 'train_step is in the profile');
    assert.equal(step.calls, 20);
    assert.match(step.file, /train_small\.py$/);
    assert.ok(step.cumulative >= step.own && step.own >= 0);
    const caller = model.functions[step.callers[0][0]];
    assert.equal(caller.name, 'main');
});

test('pstats: names holding markup come back as the exact text', () => {
    const model = parsePstats(bytes('hostile.prof'));
    assert.deepEqual(model, json('export/hostile.prof.json'));
    const f = model.functions.find((x) => x.name.includes('<script>'));
    assert.ok(f);
    assert.equal(f.name, "<script>alert('x')</script>");
    assert.match(f.file, /<img src=x onerror=alert\(1\)>\.py$/);
    assert.equal(f.calls, 3);
});

test('pstats: every truncation of a real file is a TruncatedError, never another exception', () => {
    const data = bytes('train.prof');
    for (const cut of [1, 2, 5, 17, 100, 1000, data.length >> 1, data.length - 1]) {
        assert.throws(() => parsePstats(data.subarray(0, cut)), TruncatedError, `cut at ${cut}`);
    }
});

test('pstats: other files are refused with a FileFormatError', () => {
    assert.throws(() => parsePstats(new Uint8Array()), /empty/);
    assert.throws(() => parsePstats(bytes('train.lprof')), FileFormatError);
    assert.throws(() => parsePstats(new TextEncoder().encode('{"a": 1}')), FileFormatError);
    const random = new Uint8Array(4096).map((_, i) => (i * 2654435761) >>> 24);
    random[0] = 0x7b;
    assert.throws(() => parsePstats(random), FileFormatError);
});

test('lprof: a real line_profiler file reads exactly as the Python exporter reads it', () => {
    const model = parseLprof(bytes('train.lprof'));
    assert.deepEqual(model, json('export/train.lprof.json'));
    assert.deepEqual(model.functions.map((f) => f.name).sort(), ['main', 'train_step']);
    const step = model.functions.find((f) => f.name === 'train_step')!;
    assert.equal(step.line, 10);
    assert.deepEqual(step.lines.map(([line]) => line), [11, 12, 13, 14, 15, 16]);
    assert.ok(step.lines.every(([, hits]) => hits === 20));
});

test('lprof: pickle protocols 0 and 2 read the same record', () => {
    const p5 = parseLprof(bytes('train.lprof'));
    for (const name of ['train.p0.lprof', 'train.p2.lprof']) {
        const m = parseLprof(bytes(name));
        assert.deepEqual(m.functions.map((f) => [f.name, f.lines.map((l) => l.slice(0, 2))]),
            p5.functions.map((f) => [f.name, f.lines.map((l) => l.slice(0, 2))]), name);
    }
});

test('lprof: a pickle naming anything but LineStats is refused, and nothing runs', () => {
    assert.throws(() => parseLprof(bytes('evil.lprof')), /refusing to read a pickle that names (posix|os)\.system/);
    assert.equal(existsSync(join(dirname(fixture('evil.lprof')), 'PWNED')), false);
});

test('lprof: truncated and foreign files are FileFormatErrors', () => {
    const data = bytes('train.lprof');
    for (const cut of [1, 3, 12, 40, data.length - 2]) {
        assert.throws(() => parseLprof(data.subarray(0, cut)), FileFormatError, `cut at ${cut}`);
    }
    assert.throws(() => parseLprof(bytes('train.prof')), /not a line_profiler file/);
    assert.throws(() => parseLprof(new Uint8Array()), /empty/);
});
