// The Python side the extension relies on, run with the project's Python: the exporter's
// errors (one line, exit 2, never a traceback, nothing unpickled) and the inspector's bounds.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, test } from 'node:test';
import { fixture } from './_fixtures';

const PYTHON = process.env.PYTHON ?? join(__dirname, '..', '..', '..', '.venv', 'bin', 'python');
const tmp = mkdtempSync(join(tmpdir(), 'tdap-python-'));
after(() => rmSync(tmp, { recursive: true, force: true }));

function python(args: string[]): { status: number | null; stdout: string; stderr: string } {
    const r = spawnSync(PYTHON, args, { encoding: 'utf8', timeout: 120_000 });
    return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

test('export: broken files are one error line and exit status 2', () => {
    const prof = readFileSync(fixture('train.prof'));
    const cases: [string, Buffer | null][] = [
        ['empty.prof', Buffer.alloc(0)],
        ['cut.prof', prof.subarray(0, 3000)],
        ['cut.lprof', readFileSync(fixture('train.lprof')).subarray(0, 60)],
        ['text.prof', Buffer.from('import torch\n')],
        ['evil.lprof', null],
    ];
    for (const [name, data] of cases) {
        const path = data ? join(tmp, name) : fixture(name);
        if (data) {
            writeFileSync(path, data);
        }
        const r = python(['-m', 'tensor_dap.profiling.export', path]);
        assert.equal(r.status, 2, `${name}: ${r.stderr}`);
        assert.equal(r.stdout, '');
        assert.match(r.stderr, /^tensor-dap: error: .+\n$/, name);
        assert.doesNotMatch(r.stderr, /Traceback/);
    }
    assert.equal(existsSync(join(dirname(fixture('evil.lprof')), 'PWNED')), false, 'the hostile pickle ran nothing');
    const dir = python(['-m', 'tensor_dap.profiling.export', tmp]);
    assert.equal(dir.status, 2);
    const usage = python(['-m', 'tensor_dap.profiling.export']);
    assert.equal(usage.status, 2);
});

test('inspector: no torch import in a program without torch; huge and strided tensors stay fast', () => {
    const r = python(['-c', `
import sys, json, time
from tensor_dap.dap import inspector
out = json.loads(inspector.inspect_frame_json({"n": 3}))
assert out == {"version": 1, "tensors": [], "more": 0, "cut_short": False}, out
assert "torch" not in sys.modules, "inspect_frame_json imported torch"
import torch
x = torch.randn(6000, 6000).t()[::2]          # 18M elements, not contiguous
t = time.perf_counter(); d = json.loads(inspector.inspect_tensor_json(x)); took = time.perf_counter() - t
assert d["histogram"]["sampled"] and d["heatmap"]["sampled"], d["heatmap"]["sampled"]
assert sum(d["histogram"]["counts"]) == d["histogram"]["total"] <= 1 << 20
assert d["heatmap"]["rows"] == 64 and d["heatmap"]["cols"] == 64
frame = {f"t{i}": torch.zeros(3) for i in range(inspector.MAX_TENSORS + 5)}
f = json.loads(inspector.inspect_frame_json(frame))
assert len(f["tensors"]) == inspector.MAX_TENSORS and f["more"] == 5
e = json.loads(inspector.inspect_tensor_json(torch.ones(2, 2), bins="x"))
assert e["version"] == 1 and e["error"].startswith("ValueError"), e
print(round(took, 3))
`]);
    assert.equal(r.status, 0, r.stderr);
    assert.ok(Number(r.stdout.trim()) < 2, `inspect_tensor_json took ${r.stdout.trim()} s`);
});
