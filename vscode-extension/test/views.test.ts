// View models: the .prof table, callers/callees and icicle; line-profile marks and the
// mapping of profiled files onto open documents.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseLprof } from '../src/parsers/lprof';
import { importSplit } from '../src/parsers/importSplit';
import { parsePstats } from '../src/parsers/pstats';
import { heatLevel, lineMarks, matchProfiledFile, formatSeconds } from '../src/views/lineProfile';
import { CallGraph, profTable } from '../src/views/profView';
import { bytes, json } from './_fixtures';

const prof = parsePstats(bytes('train.prof'));
const graph = new CallGraph(prof);

test('table: one row per function, files shared', () => {
    const t = profTable(prof);
    assert.equal(t.name.length, prof.functions.length);
    assert.ok(t.files.length < t.name.length);
    const i = t.name.indexOf('train_step');
    assert.match(t.files[t.file[i]], /train_small\.py$/);
    assert.equal(t.calls[i], 20);
});

test('callers and callees mirror each other', () => {
    const step = prof.functions.find((f) => f.name === 'train_step')!;
    const main = prof.functions.find((f) => f.name === 'main' && f.file.endsWith('train_small.py'))!;
    assert.deepEqual(graph.callersOf(step.id).map((r) => r.id), [main.id]);
    const fromMain = graph.calleesOf(main.id).find((r) => r.id === step.id)!;
    assert.equal(fromMain.calls, 20);
    assert.equal(fromMain.cumulative, step.callers[0][4]);
    const callees = graph.calleesOf(step.id);
    assert.ok(callees.length >= 4);
    for (let k = 1; k < callees.length; k++) {
        assert.ok(callees[k - 1].cumulative >= callees[k].cumulative, 'most time first');
    }
});

test('icicle: children inside their parent, no call edge twice on a path, bounded', () => {
    const nodes = graph.icicle({ minFraction: 0.001 });
    assert.ok(nodes.length > 20);
    assert.equal(nodes[0].depth, 0);
    const stack: typeof nodes = [];
    for (const n of nodes) {
        while (stack.length > n.depth) {
            stack.pop();
        }
        const parent = stack[stack.length - 1];
        if (parent) {
            assert.ok(n.x >= parent.x - 1e-9 && n.x + n.w <= parent.x + parent.w + 1e-9, 'inside the parent');
            const edges = stack.slice(1).map((s, k) => `${stack[k].id}>${s.id}`);
            assert.ok(!edges.includes(`${parent.id}>${n.id}`), 'no call edge twice on a path');
        }
        assert.ok(n.w >= 0.001 - 1e-12 && n.x >= 0 && n.x + n.w <= 1 + 1e-9);
        stack.push(n);
    }
    const step = nodes.find((n) => prof.functions[n.id].name === 'train_step');
    assert.ok(step, 'the training step is in the tree');
    const cumulative = prof.functions[step.id].cumulative;
    assert.ok(step.depth >= 4 && Math.abs(step.time - cumulative) < 0.05 * cumulative, `train_step at depth ${step.depth}: ${step.time} s of ${cumulative} s`);
    assert.ok(graph.icicle({ maxNodes: 10 }).length <= 10);
});

test('icicle without imports: the program\'s own tree, each call cut by its callee\'s imports', () => {
    const split = importSplit(prof, json('export/train.prof.imports.json'));
    const nodes = graph.icicle({ minFraction: 0.001, without: split });
    assert.ok(nodes.length > 10 && nodes.every((n) => split.cumulative[n.id] >= 0), 'no function that is all import');
    const roots = nodes.filter((n) => n.depth === 0);
    assert.equal(prof.functions[roots[0].id].name, '<module>');
    assert.match(prof.functions[roots[0].id].file, /train_small\.py$/);  // the script, not exec or the runner
    const step = prof.functions.find((f) => f.name === 'train_step')!;
    const withImports = graph.icicle({ minFraction: 0.001 }).find((n) => n.id === step.id)!;
    const without = nodes.find((n) => n.id === step.id)!;
    assert.ok(Math.abs(without.time - split.cumulative[step.id]) < 0.05 * split.cumulative[step.id], `${without.time}`);
    // (the fixture's run imports torch: most of its profile; how much depends on the machine, so only the ratio)
    assert.ok(without.w > 0.3 && withImports.w < 0.5 * without.w, `train_step: ${without.w} of the tree, ${withImports.w} with imports`);
});

test('line marks: time, share of the function, hits, heat', () => {
    const model = parseLprof(bytes('train.lprof'));
    const file = model.functions[0].file;
    const marks = lineMarks(model, file);
    const step = model.functions.find((f) => f.name === 'train_step')!;
    const backward = marks.find((m) => m.line === 14)!;
    assert.equal(backward.hits, 20);
    assert.ok(Math.abs(marks.filter((m) => m.line >= 11 && m.line <= 16).reduce((s, m) => s + m.percent, 0) - 100) < 1e-6);
    assert.equal(backward.time, step.lines.find(([l]) => l === 14)![2]);
    assert.match(backward.label, /^[\d.]+ (ms|µs|s)  [\d.]+%  20 hits$/);
    assert.match(marks.find((m) => m.hits === 1)!.label, /  1 hit$/);
    assert.deepEqual(lineMarks(model, '/elsewhere.py'), []);
    assert.deepEqual([heatLevel(0), heatLevel(0.5), heatLevel(1), heatLevel(3), heatLevel(50), heatLevel(100)], [0, 0, 1, 2, 5, 5]);
    assert.deepEqual([formatSeconds(2), formatSeconds(0.0123), formatSeconds(4e-6), formatSeconds(3e-9)], ['2.00 s', '12.3 ms', '4.0 µs', '3 ns']);
});

test('profiled files map onto documents by the longest shared path tail', () => {
    const files = ['/remote/proj/src/train.py', '/remote/proj/tools/train.py', '/remote/proj/model.py'];
    assert.equal(matchProfiledFile(files, '/remote/proj/model.py'), '/remote/proj/model.py');
    assert.equal(matchProfiledFile(files, '/home/me/proj/src/train.py'), '/remote/proj/src/train.py');
    assert.equal(matchProfiledFile(files, '/home/me/other/train.py'), undefined, 'ambiguous: two train.py');
    assert.equal(matchProfiledFile(files, '/home/me/model.py'), '/remote/proj/model.py');
    assert.equal(matchProfiledFile(files, '/home/me/data.py'), undefined);
    assert.equal(matchProfiledFile(['C:\\work\\a.py'], 'C:/work/a.py'), 'C:\\work\\a.py');
});
