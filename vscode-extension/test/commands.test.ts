// The command lines "Profile Current File" and "Open TensorBoard" build, the function picker's
// list, and what a failed profile run says, checked against the real `tensor-dap profile`.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { hasProfileMarks, profileArgs, profileFailure, pythonFunctions, tensorBoardArgs } from '../src/commands/commandLines';

const PYTHON = process.env.PYTHON ?? join(__dirname, '..', '..', '..', '.venv', 'bin', 'python');
const TRAIN_SMALL = join(__dirname, '..', '..', 'test', 'fixtures', 'train_small.py');

function run(args: string[], cwd: string): Promise<{ code: number | null; stderr: string }> {
    return new Promise((resolve, reject) => {
        const child = spawn(PYTHON, args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
        let stderr = '';
        child.stderr.setEncoding('utf8').on('data', (d: string) => { stderr += d; });
        child.on('error', reject);
        child.on('close', (code) => resolve({ code, stderr }));
    });
}

test('profile: the command line for each mode; --function only in line mode, before the script', () => {
    assert.deepEqual(profileArgs('cpu', '/w/train.py'), ['-m', 'tensor_dap', 'profile', '--mode', 'cpu', '/w/train.py']);
    assert.deepEqual(profileArgs('line', '/w/my train.py', ['train_step', 'Net.forward']),
        ['-m', 'tensor_dap', 'profile', '--mode', 'line', '--function', 'train_step', '--function', 'Net.forward', '/w/my train.py']);
    assert.deepEqual(profileArgs('torch', '/w/train.py', ['train_step']), ['-m', 'tensor_dap', 'profile', '--mode', 'torch', '/w/train.py']);
    assert.deepEqual(profileArgs('memory', 'x.py'), ['-m', 'tensor_dap', 'profile', '--mode', 'memory', 'x.py']);
});

test('tensorboard: the command line', () => {
    assert.deepEqual(tensorBoardArgs('/w/runs', 6123), ['-m', 'tensor_dap', 'tensorboard', '/w/runs', '--port', '6123']);
});

test('function picker: top-level functions and methods of top-level classes, in file order', () => {
    assert.deepEqual(pythonFunctions(readFileSync(TRAIN_SMALL, 'utf8')).map((f) => [f.name, f.line]),
        [['make_model', 6], ['train_step', 10], ['main', 19]]);
    const source = [
        'import torch',
        '@torch.no_grad()',
        'def evaluate(model):',
        '    def inner():',
        '        pass',
        '    return inner',
        '',
        '@dataclass',
        'class Net(nn.Module):',
        '    """A model."""',
        '',
        '    # a comment',
        '    def forward(self, x):',
        '        def helper(y): return y',
        '        return helper(x)',
        '',
        '    async def stream(self):',
        '        pass',
        'x = 1',
        '    ',
        'async def fetch[T](url):',
        '    pass',
        'def  spaced ():',
        '  pass',
        '',
    ].join('\r\n');
    assert.deepEqual(pythonFunctions(source).map((f) => `${f.name}:${f.line}`),
        ['evaluate:3', 'Net.forward:13', 'Net.stream:17', 'fetch:21', 'spaced:23']);
    assert.deepEqual(pythonFunctions(''), []);
});

test('profile marks: a decorator named profile, nothing else', () => {
    assert.ok(hasProfileMarks('@tensor_dap.profile\ndef step(): pass'));
    assert.ok(hasProfileMarks('class A:\n    @profile  # hot\n    def f(self): pass'));
    assert.ok(!hasProfileMarks(readFileSync(TRAIN_SMALL, 'utf8')));
    assert.ok(!hasProfileMarks('@profiler.record_function("x")\ndef f(): pass\n# @profile later'));
    assert.ok(!hasProfileMarks('@cProfile_wrapper\ndef f(): pass'));
});

test('profile failures: tensor_dap\'s own line, how to install, or the program\'s exit', () => {
    assert.equal(profileFailure('python3', { code: 2 }, 'profile written to x\ntensor-dap: error: no function to profile: name one with --function NAME\n'),
        'tensor_dap profile: no function to profile: name one with --function NAME');
    assert.match(profileFailure('/v/python', { code: 1 }, "/v/python: No module named tensor_dap\n"), /tensor_dap is not installed for \/v\/python.*\n\/v\/python -m pip install -U tensor-dap/);
    assert.match(profileFailure('/no/python', { spawnError: 'ENOENT' }, ''), /Python was not found at "\/no\/python"/);
    assert.equal(profileFailure('python3', { code: 1 }, 'Traceback (most recent call last):\n  ...\nZeroDivisionError: division by zero\n'),
        'tensor_dap: the profiled program exited with code 1 (ZeroDivisionError: division by zero); see the terminal.');
});

test('profile: the real command, run with the command lines the extension builds', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tdap-commands-'));
    const script = join(dir, 'work.py');  // no torch: the two runs take a second, not ten
    writeFileSync(script, 'def work(n):\n    return sum(range(n))\n\n\nclass Data:\n    def load(self):\n        return work(1000)\n\n\nprint(Data().load())\n');
    const names = pythonFunctions(readFileSync(script, 'utf8')).map((f) => f.name);
    assert.deepEqual(names, ['work', 'Data.load']);
    const [unmarked, picked] = await Promise.all([
        run(profileArgs('line', script), dir),
        run(profileArgs('line', script, names), dir),
    ]);
    // No --function (the picker's "the whole file"): the file's top-level code and every function it defines.
    assert.equal(unmarked.code, 0, unmarked.stderr);
    assert.match(unmarked.stderr, /work\.py:1 <module>/);
    assert.match(unmarked.stderr, /work\.py:6 Data\.load/);
    assert.equal(picked.code, 0, picked.stderr);
    assert.doesNotMatch(picked.stderr, /<module>/);
    assert.match(picked.stderr, /work\.py:1 work/);
    assert.match(picked.stderr, /work\.py:6 Data\.load/);
    const runs = readdirSync(join(dir, '.tensor_dap', 'profiles'));
    assert.equal(runs.length, 2);
    assert.ok(runs.some((r) => existsSync(join(dir, '.tensor_dap', 'profiles', r, 'line.lprof'))));
    rmSync(dir, { recursive: true, force: true });  // (a failing run keeps it, to look at)
});
