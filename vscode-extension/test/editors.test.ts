// What an editor posts before its page draws (the loaders), the page template's CSP and
// escaping, and how Python failures are explained.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { errorMessage, loadImports, loadIncident, loadLprof, loadMemory, loadProf, loadTrace } from '../src/editors/loaders';
import { PythonError, TensorDapError, explain, quote } from '../src/pythonErrors';
import { contentSecurityPolicy, escapeHtml, pageHtml } from '../src/webview/html';
import type { HostMessage } from '../src/webview/messages';
import { bytes, fixture, json } from './_fixtures';

const tmp = mkdtempSync(join(tmpdir(), 'tdap-editors-'));
after(() => rmSync(tmp, { recursive: true, force: true }));

function expectType<T extends HostMessage['type']>(m: HostMessage, type: T): Extract<HostMessage, { type: T }> {
    assert.equal(m.type, type, m.type === 'error' ? `${m.title}: ${m.message}` : m.type);
    return m as Extract<HostMessage, { type: T }>;
}

test('page: strict CSP with the nonce, one script, the title escaped', () => {
    const html = pageHtml({ title: '<script>alert(1)</script>.prof', cspSource: 'vscode-resource:', scriptUri: 'vscode-resource:/ui/prof.js', styleUri: 'vscode-resource:/ui/style.css', nonce: 'abc123' });
    assert.match(html, /<meta http-equiv="Content-Security-Policy" content="default-src &#39;none&#39;; img-src vscode-resource: data:; style-src vscode-resource:; font-src vscode-resource:; script-src &#39;nonce-abc123&#39;">/);
    assert.equal(html.match(/<script/g)!.length, 1);
    assert.match(html, /<script nonce="abc123" src="vscode-resource:\/ui\/prof.js"><\/script>/);
    assert.match(html, /<title>&lt;script&gt;alert\(1\)&lt;\/script&gt;.prof<\/title>/);
    assert.ok(!contentSecurityPolicy('x', 'n').includes('unsafe'));
    assert.equal(escapeHtml(`<a href="x" onclick='y'>&</a>`), '&lt;a href=&quot;x&quot; onclick=&#39;y&#39;&gt;&amp;&lt;/a&gt;');
});

test('prof: the table, icicle and timing for a real profile; an error page for a cut one', async () => {
    const { message } = await loadProf(fixture('train.prof'));
    const m = expectType(message, 'prof');
    assert.equal(m.fileName, 'train.prof');
    assert.ok(m.table.name.length > 1000 && m.loadMs > 0);
    const cut = join(tmp, 'cut.prof');
    writeFileSync(cut, bytes('train.prof').subarray(0, 5000));
    const e = expectType((await loadProf(cut)).message, 'error');
    assert.equal(e.title, 'cut.prof cannot be shown as a cProfile file');
    assert.match(e.message, /truncated/);
    assert.deepEqual(e.actions, ['reopenAsText', 'retry']);
    const missing = expectType((await loadProf(join(tmp, 'nope.prof'))).message, 'error');
    assert.match(missing.message, /ENOENT/);
});

test('prof: a format variant the built-in reader does not know goes to the Python exporter', async () => {
    const odd = join(tmp, 'odd.prof');
    writeFileSync(odd, Buffer.from([0x7b, 0x3f, 0x00]));  // a dict holding an unknown marshal type
    let asked = '';
    const reference = json('export/train.prof.json');
    const m = expectType((await loadProf(odd, { exportWithPython: async (p) => { asked = p; return reference; } })).message, 'prof');
    assert.equal(asked, odd);
    assert.equal(m.table.name.length, (reference as { functions: unknown[] }).functions.length);
    const e = expectType((await loadProf(odd, { exportWithPython: async () => { throw new PythonError('Python was not found at "python3".', 'settings'); } })).message, 'error');
    assert.deepEqual(e.actions, ['openSettings', 'retry']);
    assert.equal(e.title, 'odd.prof needs Python to be read');
    const none = expectType((await loadProf(odd)).message, 'error');
    assert.match(none.message, /unknown marshal type 0x3f/);
});

test('prof: tensor_dap\'s estimate of the time spent importing, by function; none without it', async () => {
    const path = fixture('train.prof');
    const model = (await loadProf(path)).model!;
    const reference = json('export/train.prof.imports.json');
    let asked = '';
    const m = expectType(await loadImports(path, model, { importsWithPython: async (p) => { asked = p; return reference; } }), 'imports');
    assert.equal(asked, path);
    const split = m.split!;
    assert.ok(split.importing > 0.5 * split.profiled, `${split.importing} of ${split.profiled}`);  // import torch: most of 20 steps
    const fns = model.functions;
    const torchBody = fns.find((f) => f.name === '<module>' && f.file.replace(/\\/g, '/').endsWith('torch/__init__.py'))!;
    assert.equal(split.cumulative[torchBody.id], -1);  // all import: left out
    for (const name of ['train_step', 'main']) {
        const f = fns.find((g) => g.name === name && g.file.endsWith('train_small.py'))!;
        assert.ok(split.cumulative[f.id] >= 0 && split.cumulative[f.id] <= f.cumulative + 1e-9, name);
    }
    const main = fns.find((g) => g.name === 'main' && g.file.endsWith('train_small.py'))!;
    assert.ok(split.cumulative[main.id] < main.cumulative, 'the optimizer\'s lazy imports are taken out of main');
    assert.equal(expectType(await loadImports(path, model), 'imports').split, null);  // no Python: the page stays whole
    const broken = { importsWithPython: async () => ({ format: 'tensor_dap.profiling.import_json', version: 2, functions: [] }) };
    assert.equal(expectType(await loadImports(path, model, broken), 'imports').split, null);
    const failing = { importsWithPython: async () => { throw new Error('No module named tensor_dap.profiling.import_json'); } };
    assert.equal(expectType(await loadImports(path, model, failing), 'imports').split, null);
});

test('lprof: functions with their source lines', async () => {
    const source = readFileSync(join(__dirname, '..', '..', 'test', 'fixtures', 'train_small.py'), 'utf8').split('\n');
    const m = expectType((await loadLprof(fixture('train.lprof'), { readSource: async (_f, a, b) => source.slice(a - 1, b) }, true)).message, 'lprof');
    const step = m.functions.find((f) => f.name === 'train_step')!;
    assert.equal(step.source![0], 'def train_step(model, opt, x, y):');
    assert.equal(step.source![4], '    loss.backward()');
    assert.equal(m.decorations, true);
    expectType((await loadLprof(fixture('evil.lprof'))).message, 'error');
});

test('trace, memory and incident loaders', async () => {
    const t = expectType(await loadTrace(fixture('train.pt.trace.json.gz')), 'trace');
    assert.ok(t.summary.ops.length > 10 && t.bytes < 100_000);
    const mem = expectType(await loadMemory(fixture('memory.json')), 'memory');
    assert.ok(mem.report.sites.some((s) => s.file.endsWith('train_small.py') && s.function === 'make_model'));
    assert.ok(mem.report.sites.every((s) => s.file.endsWith('train_small.py')), 'only the program\'s own lines');
    const memory = join(tmp, 'memory.json');
    writeFileSync(memory, JSON.stringify({ peak_rss: 1, sites: [{ file: '<script>.py', line: 2, size: 3, count: 1 }] }));
    assert.equal(expectType(await loadMemory(memory), 'memory').report.sites[0].file, '<script>.py');
    const inc = expectType(await loadIncident(fixture('report.json')), 'incident');
    assert.equal(inc.report.moduleType, 'Boom');
    const bad = join(tmp, 'report.json');
    writeFileSync(bad, '{"traceEvents": []}');
    assert.match(expectType(await loadIncident(bad), 'error').message, /not a tensor_dap incident report/);
    expectType(await loadTrace(memory), 'error');
});

test('python errors say what to do next', () => {
    const notFound = explain('/venv/bin/python', 'tensor_dap.profiling.export', { code: 'ENOENT', message: 'spawn ENOENT' }, '');
    assert.ok(notFound instanceof PythonError && notFound.hint === 'settings');
    assert.match(notFound.message, /tensorDap.pythonPath/);
    const missing = explain('/my env/python', 'tensor_dap.profiling.export', { code: 1, message: 'exit 1' }, "/my env/python: Error while finding module specification for 'tensor_dap.profiling.export' (ModuleNotFoundError: No module named 'tensor_dap')");
    assert.match(missing.message, /'\/my env\/python' -m pip install -U tensor-dap/);
    const bad = explain('python3', 'tensor_dap.profiling.export', { code: 2, message: 'exit 2' }, 'tensor-dap: error: x.prof: the file is empty\n');
    assert.ok(bad instanceof TensorDapError);
    assert.equal(bad.message, 'x.prof: the file is empty');
    assert.equal(errorMessage(bad, '/a/x.prof', 'cProfile').type, 'error');
    assert.equal(quote('/usr/bin/python3'), '/usr/bin/python3');
    assert.equal(quote("it's"), `'it'\\''s'`);
});
