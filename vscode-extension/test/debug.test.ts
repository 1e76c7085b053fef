// What the extension reads back from debugpy (Python string reprs holding the inspector's JSON,
// produced by real Python and the real inspector) and the launch.json templates and merge.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { parse } from 'jsonc-parser';
import { frameExpression, parseFrameTensors, parseTensorDetail, tensorExpression, explainEvaluateError } from '../src/debug/inspectorModel';
import { inputIds, mergeLaunchJson, parseTemplates } from '../src/debug/launchTemplates';
import { decodeJsonResult, decodePyStr, ReprError } from '../src/debug/pyRepr';
import { replayConfiguration } from '../src/debug/replayConfig';
import { parseIncidentReport } from '../src/parsers/incident';
import { json } from './_fixtures';

const TEMPLATES = parseTemplates(readFileSync(join(__dirname, '..', '..', '..', 'tensor_dap', 'dap', 'launch_templates.json'), 'utf8'));

test('repr: every string Python wrote decodes back to itself', () => {
    for (const [original, repr] of json<[string, string][]>('reprs.json')) {
        assert.equal(decodePyStr(repr), original, repr);
    }
});

test('repr: a value the debugger shortened is an error, not half a value', () => {
    assert.throws(() => decodePyStr("'{\"a\": 1...'b'"), ReprError);
    assert.throws(() => decodePyStr('{"a": 1}'), /not a Python string literal/);
    assert.throws(() => decodePyStr("'abc\\'"), ReprError);
    assert.throws(() => decodePyStr("'\\x4'"), /broken/);
    assert.throws(() => decodeJsonResult("'{\"a\": 1, ...'"), /not JSON/);
});

test('inspector: the real frame and tensor answers, through repr, parse into the view model', () => {
    const answers = json<{ frame: string; tensor: string }>('inspector.json');
    const frame = parseFrameTensors(decodeJsonResult(answers.frame));
    assert.deepEqual(frame.tensors.map((t) => [t.name, t.expr, t.dtype, t.shape]), [['x', 'x', 'float32', [4, 4]], ["batch['ids']", "batch['ids']", 'int64', [5]]]);
    assert.match(frame.tensors[0].line!, /^tensor\[4, 4\] n=16 \(64 B\) x∈\[0, 15\] finite μ=7\.6 σ=4\.911 NaN!×1$/);
    const detail = parseTensorDetail(decodeJsonResult(answers.tensor));
    assert.equal(detail.summary.nan, 1);
    assert.ok(detail.histogram);
    assert.equal(detail.histogram.total, 15);
    assert.equal(detail.histogram.nonfinite, 1);
    assert.equal(detail.histogram.counts.length, 8);
    assert.equal(detail.histogram.counts.reduce((a, b) => a + b, 0), 15);
    assert.ok(detail.heatmap);
    assert.deepEqual([detail.heatmap.rows, detail.heatmap.cols], [2, 2]);
    assert.equal(detail.heatmap.cells.filter((c) => c === null).length, 1, 'the cell holding the NaN');
});

test('inspector: errors from the debuggee are explained', () => {
    assert.throws(() => parseFrameTensors({ version: 1, error: 'RuntimeError: boom' }), /could not inspect this frame: RuntimeError: boom/);
    assert.throws(() => parseFrameTensors({ version: 2, tensors: [] }), /version 2/);
    assert.match(explainEvaluateError("Traceback ... ModuleNotFoundError: No module named 'tensor_dap'"), /pip install tensor-dap/);
    assert.equal(frameExpression(), "__import__('tensor_dap').inspect_frame_json(locals())");
    assert.equal(tensorExpression("batch['x']", 32, 16), "__import__('tensor_dap').inspect_tensor_json(batch['x'], bins=32, heat=16)");
});

test('templates: the names and shapes the issue asks for, all debugpy', () => {
    assert.deepEqual(TEMPLATES.configurations.map((c) => c.name), [
        'Debug Training (tensor_dap)', 'Debug Training (args)', 'Attach to GPU box (SSH tunnel)', 'Debug tests', 'Profile current file']);
    assert.ok(TEMPLATES.configurations.every((c) => c.type === 'debugpy'));
    const train = TEMPLATES.configurations[0];
    assert.deepEqual([train.module, train.args, train.console, train.justMyCode], ['tensor_dap', ['run', '--guard', '${file}'], 'integratedTerminal', false]);
    for (const c of TEMPLATES.configurations) {
        for (const id of inputIds(c)) {
            assert.ok(TEMPLATES.inputs.some((i) => i.id === id), `${c.name} uses \${input:${id}}, which the templates define`);
        }
    }
    assert.deepEqual(inputIds(TEMPLATES.configurations[1]), ['tensorDapTrainingArgs']);
});

test('merge: into no launch.json, a new file with the inputs the configurations use', () => {
    const r = mergeLaunchJson(undefined, TEMPLATES);
    const doc = JSON.parse(r.text);
    assert.equal(doc.version, '0.2.0');
    assert.equal(doc.configurations.length, 5);
    assert.deepEqual(doc.inputs.map((i: { id: string }) => i.id), ['tensorDapTrainingArgs']);
    const one = JSON.parse(mergeLaunchJson('', TEMPLATES, ['Debug Training (tensor_dap)']).text);
    assert.equal(one.inputs, undefined);
});

test('merge: keeps comments, formatting and the user\'s own configurations', () => {
    const existing = [
        '// my launch file',
        '{',
        '\t"version": "0.2.0",',
        '\t"configurations": [',
        '\t\t{ "name": "Mine", "type": "debugpy", "request": "launch", "program": "a.py" }, // keep me',
        '\t\t{ "name": "Debug tests", "type": "debugpy", "request": "launch", "module": "pytest", "args": ["-k", "mine"] },',
        '\t],',
        '\t/* inputs below */',
        '\t"inputs": [{ "id": "other", "type": "promptString" }]',
        '}',
    ].join('\n');
    const r = mergeLaunchJson(existing, TEMPLATES);
    assert.deepEqual(r.kept, ['Debug tests']);
    assert.deepEqual(r.added, ['Debug Training (tensor_dap)', 'Debug Training (args)', 'Attach to GPU box (SSH tunnel)', 'Profile current file']);
    for (const kept of ['// my launch file', '// keep me', '/* inputs below */', '"args": ["-k", "mine"]']) {
        assert.ok(r.text.includes(kept), `keeps ${kept}`);
    }
    const doc = parse(r.text);
    assert.deepEqual(doc.configurations.map((c: { name: string }) => c.name), ['Mine', 'Debug tests', ...r.added]);
    assert.deepEqual(doc.inputs.map((i: { id: string }) => i.id), ['other', 'tensorDapTrainingArgs']);
    assert.match(r.text, /\n\t\t{\n\t\t\t"name": "Debug Training \(tensor_dap\)"/, 'tab indentation kept');
    const again = mergeLaunchJson(r.text, TEMPLATES);
    assert.equal(again.text, r.text, 'merging twice changes nothing');
    assert.deepEqual(again.added, []);
});

test('merge: a launch.json that does not parse is left alone', () => {
    assert.throws(() => mergeLaunchJson('{ "configurations": [ { "name": ', TEMPLATES), /does not parse.*nothing was changed/);
    assert.throws(() => mergeLaunchJson('[1, 2]', TEMPLATES), /not a JSON object/);
    const noConfigs = parse(mergeLaunchJson('{ // empty\n}', TEMPLATES).text);
    assert.equal(noConfigs.configurations.length, 5);
    assert.equal(noConfigs.version, '0.2.0');
});

test('merge: one-line, empty and comma-less arrays stay valid', () => {
    const names = ['Debug Training (tensor_dap)', 'Debug Training (args)'];
    for (const existing of [
        '{"version":"0.2.0","configurations":[{"name":"a","type":"x","request":"launch"}]}',
        '{\n  "configurations": []\n}',
        '{\n  "configurations": [\n    {"name": "a", "type": "x", "request": "launch"}\n  ],\n  "inputs": []\n}',
        '{\r\n  "configurations": [\r\n    {"name": "a", "type": "x", "request": "launch"} // mine\r\n  ]\r\n}\r\n',
    ]) {
        const out = mergeLaunchJson(existing, TEMPLATES, names).text;
        const errors: import('jsonc-parser').ParseError[] = [];
        const doc = parse(out, errors, { allowTrailingComma: false });
        assert.deepEqual(errors, [], out);
        assert.deepEqual(doc.configurations.slice(-2).map((c: { name: string }) => c.name), names, out);
        assert.deepEqual(doc.inputs.map((i: { id: string }) => i.id), ['tensorDapTrainingArgs'], out);
        if (existing.includes('\r\n')) {
            assert.ok(!/[^\r]\n/.test(out), 'CRLF kept');
            assert.ok(out.includes('"launch"}, // mine'), out);
        }
    }
});

test('replay: the user\'s script under debugpy with the bundle named in its environment', () => {
    const report = parseIncidentReport(JSON.stringify({ kind: 'nonfinite', headline: 'x', program: '/ws/train.py', args: ['--lr', '3e-4'] }));
    const c = replayConfiguration('/ws/.tensor_dap/incidents/20260101-120000-step42', report, '/ws/train.py', '/ws');
    assert.deepEqual(c, {
        name: 'Replay incident 20260101-120000-step42', type: 'debugpy', request: 'launch', module: 'tensor_dap',
        args: ['run', '--replay', '/ws/.tensor_dap/incidents/20260101-120000-step42', '/ws/train.py', '--lr', '3e-4'],
        cwd: '/ws', console: 'integratedTerminal', justMyCode: false,
    });
    assert.deepEqual(replayConfiguration('/b', report, '/ws/other.py', '/ws').args, ['run', '--replay', '/b', '/ws/other.py'],
        'the report\'s arguments belong to its own program');
    assert.deepEqual(replayConfiguration('/b', report, '/ws/train.py', '/ws', true).args,
        ['run', '--replay', '/b', '--trust', '/ws/train.py', '--lr', '3e-4'], 'a bundle keeping objects.pt, trusted by the user');
});
