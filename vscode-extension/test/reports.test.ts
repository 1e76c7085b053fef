// Memory and incident report readers: real output where it exists, the accepted variants,
// and broken files.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FileFormatError } from '../src/parsers/errors';
import { parseIncidentReport, summaryLine, where } from '../src/parsers/incident';
import { parseMemoryReport } from '../src/parsers/memory';
import { json, text } from './_fixtures';

test('incident: a real report written by tensor_dap.watch', () => {
    const r = parseIncidentReport(text('report.json'));
    assert.equal(r.kind, 'nonfinite');
    assert.equal(r.step, 0);
    assert.equal(r.phase, 'forward');
    assert.equal(r.module, '1');
    assert.equal(r.moduleType, 'Boom');
    assert.equal(where(r), 'forward of 1 (Boom)');
    assert.ok(Number.isNaN(r.loss), 'the loss handed to backward() in the failing step');
    assert.equal(r.headline, 'Inf born in div, in the forward of 1');
    assert.equal(r.op, 'div');
    assert.match(r.diagnosis.join(' '), /division by zero/);
    const output = r.tensors.find((t) => t.section === 'op output')!;
    assert.equal(output.nonfinite, true);
    assert.match(output.line, /^tensor\[3, 4\] .*\+Inf!×\d+ -Inf!×\d+/);
    const inputs = r.tensors.filter((t) => t.section === 'op inputs');
    assert.deepEqual(inputs.map((t) => [t.name, t.nonfinite]), [['args[0]', false], ['args[1]', false]]);
    assert.match(inputs[1].line, /all zeros/, 'the zero denominator is visible in the report');
    assert.ok(typeof r.created === 'number' && r.created > 1.5e9);
    assert.deepEqual(r.lossHistory, [[0, NaN]]);
    assert.ok(r.source && r.source.file.endsWith('make_fixtures.py'), 'the line that divided is named');
    assert.match(r.source!.text ?? '', /x \/ torch\.zeros_like\(x\)/);
});

test('incident: the newer fields are read when present, bad ones ignored', () => {
    const r = parseIncidentReport(JSON.stringify({
        kind: 'spike', headline: 'loss spiked', step: 42, loss: 'nan', op: 'aten::log',
        source: { file: 'train.py', line: 17, text: '    loss = torch.log(p)' },
        loss_history: [1.5, 1.2, 'inf', 'nan'], lr: [0.001, 'x'], diagnosis: 'log of a negative probability',
        module: '', tensors: [['x', 'y'], 5], version: 2, forward_op: 'log', max_abs: 3.5e38, mode: 'loop',
    }));
    assert.ok(Number.isNaN(r.loss));
    assert.equal(r.op, 'aten::log');
    assert.deepEqual(r.source, { file: 'train.py', line: 17, text: '    loss = torch.log(p)' });
    assert.deepEqual(r.lossHistory, [[39, 1.5], [40, 1.2], [41, Infinity], [42, NaN]]);
    assert.deepEqual(r.lr, [0.001]);
    assert.deepEqual(r.diagnosis, ['log of a negative probability']);
    assert.deepEqual([r.version, r.forwardOp, r.maxAbs, r.mode], [2, 'log', 3.5e38, 'loop']);
    assert.equal(where(r), 'the model itself');
    assert.deepEqual(r.tensors, []);
    assert.deepEqual(parseIncidentReport('{"kind": "x", "loss_history": [[3, 1.0], {"step": 4, "loss": 2}]}').lossHistory, [[3, 1], [4, 2]]);
    const near = (report: Record<string, unknown>, source: Record<string, unknown>) =>
        parseIncidentReport(JSON.stringify({ kind: 'nonfinite', headline: 'h', ...report, source: { file: 'a.py', line: 3, ...source } })).source?.near;
    assert.equal(near({ version: 3 }, { near: 'after' }), 'after', "the model's call the loss came after");
    assert.equal(near({ version: 3 }, { near: 'before' }), 'before');
    assert.equal(near({ version: 3 }, { near: 'yes' }), undefined);
    assert.equal(near({ version: 3, mode: 'loop', phase: 'loss' }, {}), undefined, "version 3: the op's own line");
    // version 2 told it by the mode and phase: an unchanged loop's loss op, or a batch's first use with no module
    assert.equal(near({ version: 2, mode: 'loop', phase: 'loss' }, { after: true }), 'after');
    assert.equal(near({ version: 2, mode: 'loop', phase: 'loss' }, {}), 'before');
    assert.equal(near({ version: 2, mode: 'loop', phase: 'input' }, {}), 'before');
    assert.equal(near({ version: 2, mode: 'loop', phase: 'input', module: 'enc' }, {}), undefined);
    assert.equal(near({ version: 2, mode: 'closure', phase: 'loss' }, {}), undefined);
    assert.equal(near({ version: 2, mode: 'loop', phase: 'forward' }, { after: true }), undefined);
});

test('incident: not a report', () => {
    assert.throws(() => parseIncidentReport('{"a": 1}'), FileFormatError);
    assert.throws(() => parseIncidentReport('[1]'), FileFormatError);
    assert.throws(() => parseIncidentReport(text('report.json').slice(0, 200)), /not valid JSON/);
});

test('incident: summary lines from TensorSummary.to_dict', () => {
    assert.equal(summaryLine({ kind: 'Parameter', shape: [2, null], dtype: 'torch.bfloat16', device: 'cuda:0', min: -1, max: 2.5, mean: 'nan', has_nan: true }),
        'Parameter[2, ?] bfloat16 cuda:0 x∈[-1, 2.5] μ=nan NaN!');
});

test('memory: sites sorted by size, variants accepted, bad entries counted', () => {
    const r = parseMemoryReport(JSON.stringify({
        peak_rss: 123456789, measure: 'peak',
        cuda: { device: 'cuda:0', peak_allocated: 1000, peak_reserved: 2048 },
        sites: [
            { file: 'a.py', line: 3, size: 10, count: 2 },
            { filename: 'b.py', lineno: 7, bytes: 500, n: 1, function: 'load' },
            { file: 'c.py', size: -1 }, 'junk', { line: 3, size: 4 },
            { file: 'm.py', line: 1, size: 1, count: 1, function: null }, // the writer's module-level line
        ],
    }));
    assert.deepEqual(r.sites.map((s) => [s.file, s.line, s.size, s.count]), [['b.py', 7, 500, 1], ['a.py', 3, 10, 2], ['m.py', 1, 1, 1]]);
    assert.equal(r.sites[0].function, 'load');
    assert.equal(r.sites[2].function, undefined, 'a null function is no function, not the text "null"');
    assert.equal(r.skipped, 3);
    assert.equal(r.peakRss, 123456789);
    assert.deepEqual(r.cuda, { device: 'cuda:0', peakAllocated: 1000, peakReserved: 2048 });
    assert.equal(r.totalSize, 511);
    assert.equal(parseMemoryReport('[{"file": "x.py", "line": 1, "size": 5}]').sites.length, 1);
    assert.deepEqual(parseMemoryReport('{"top": [], "cuda_peak_allocated": 7}').cuda, { peakAllocated: 7, peakReserved: undefined });
});

test('memory: a real report written by tensor-dap profile --mode memory', () => {
    const raw = json<{ sites: { file: string }[]; cuda: unknown }>('memory.json');
    assert.ok(raw.sites.every((s) => s.file.endsWith('train_small.py')), 'the writer lists lines of the program only');
    assert.equal(raw.cuda, null, '"cuda": null without a GPU');
    const r = parseMemoryReport(text('memory.json'));
    assert.match(r.program!, /train_small\.py$/);
    assert.equal(r.measure, 'live Python bytes at the largest snapshot');
    assert.ok(r.peakRss! > 50e6, `peak RSS ${r.peakRss}`);
    assert.equal(r.cuda, undefined);
    assert.equal(r.skipped, 0);
    assert.equal(r.sites.length, raw.sites.length);
    for (let k = 1; k < r.sites.length; k++) {
        assert.ok(r.sites[k - 1].size >= r.sites[k].size, 'largest first');
    }
    const ours = r.sites.filter((s) => s.file.endsWith('train_small.py'));
    assert.ok(ours.some((s) => s.function === 'make_model' && s.line === 7 && s.count > 0), JSON.stringify(ours));
    assert.ok(ours.some((s) => s.function === 'train_step' && s.line >= 11 && s.line <= 16));
    assert.equal(r.totalSize, r.sites.reduce((n, s) => n + s.size, 0));
    assert.match(r.torch!.measure!, /not live bytes/);
    const addmm = r.torch!.sites.find((s) => s.op === 'aten::addmm')!;
    assert.ok(addmm.size > 0 && addmm.file.endsWith('train_small.py') && addmm.function === 'train_step', JSON.stringify(addmm));
    assert.ok(!addmm.backward, 'the forward\'s matmul');
    const autograd = r.torch!.sites.filter((s) => s.backward);
    assert.ok(autograd.length > 0 && autograd.every((s) => s.function === 'train_step'), 'backward allocations are the backward of the function that ran the model');
});

test('memory: the CUDA block the writer adds on a GPU', () => {
    const r = parseMemoryReport(JSON.stringify({
        version: 1, kind: 'tensor_dap.memory', sites: [],
        cuda: { device: 'cuda:0', max_allocated_bytes: 4096, allocated_bytes: 1024, reserved_bytes: 8192, max_reserved_bytes: 8192, summary: '...', snapshot: null },
    }));
    assert.deepEqual(r.cuda, { device: 'cuda:0', peakAllocated: 4096, peakReserved: 8192 });
});

test('memory: not a report', () => {
    assert.throws(() => parseMemoryReport('{"rss": 1}'), /no "sites"/);
    assert.throws(() => parseMemoryReport('{"sites": [1'), /not valid JSON/);
    assert.throws(() => parseMemoryReport('3'), FileFormatError);
});
