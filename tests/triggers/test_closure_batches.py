"""An optimizer stepping with a closure that holds each step's batch, as Lightning's automatic optimization does
(``optimizer.step(closure=...)`` around ``training_step`` for every optimizer, Adam's too), with its
``accumulate_grad_batches`` running every micro-batch but the last outside ``step()``. Found on a Lightning 2.6
transformer classifier (`--break-on-nan` named the masked softmax, but ``--replay`` said the step ran clean: the
bundle replayed through the program's first closure, which holds the first batch, not the failing one).
Lightning itself is not installed here: the programs below make its calls the way it makes them."""

import json
import os
import subprocess
import sys

import pytest
import torch

from markers import marker_line
from tensor_dap import NonFiniteError
from tensor_dap.triggers.auto import AutoTriggers

TENSOR_DAP = [sys.executable, "-m", "tensor_dap", "run"]

# BAD_BATCH's sequence 5 is all padding (its attention row fully masked); LOG_BATCH's loss takes log(0) through a
# torch.where, whose gradient stays finite: a failure in the loss alone.
PROGRAM = """
import math, os, sys
import torch
from torch import nn

ACC, BAD_BATCH, LOG_BATCH = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])


class Attention(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x, pad):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        att = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(pad[:, None, :], float("-inf"))
        att = att.softmax(dim=-1)  # SOFTMAX
        return self.out(att @ v)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.att, self.head = nn.Embedding(20, 16), Attention(), nn.Linear(16, 3)

    def forward(self, tokens):
        pad = tokens == 0
        return self.head(self.att(self.emb(tokens), pad).mean(1))


def training_step(model, batch, index):
    tokens, y = batch
    logits = model(tokens)
    if index == LOG_BATCH:
        p = logits.softmax(-1).gather(1, y[:, None]).squeeze(1)
        p = torch.where(y == 2, torch.zeros_like(p), p)
        return -torch.log(p).mean()  # LOG
    return nn.functional.cross_entropy(logits, y)


torch.manual_seed(0)
model = Classifier()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
batches = []
for i in range(8):
    tokens = torch.randint(1, 20, (8, 6))
    if i == BAD_BATCH:
        tokens[5] = 0
    batches.append((tokens, tokens[:, 0] % 3))
for index, batch in enumerate(batches):
    def closure(batch=batch, index=index):
        loss = training_step(model, batch, index) / ACC
        loss.backward()
        return loss
    if (index + 1) % ACC:
        closure()  # a micro-batch outside step()
        continue
    optimizer.step(closure=closure)
    optimizer.zero_grad()
    print("STEP", index, flush=True)
"""


def _run(cmd, cwd):
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)


def _trained(tmp_path, acc, bad=-1, log=-1):
    program = tmp_path / "lit.py"
    program.write_text(PROGRAM)
    args = [str(acc), str(bad), str(log)]
    first = _run([*TENSOR_DAP, "--break-on-nan", "lit.py", *args], tmp_path)
    bundles = sorted((tmp_path / ".tensor_dap" / "incidents").iterdir())
    assert first.returncode == 1 and len(bundles) == 1, first.stderr
    flat = " ".join(first.stderr.split())
    return flat, os.path.relpath(bundles[0], tmp_path), args


def _replayed(tmp_path, bundle, args):
    again = _run([*TENSOR_DAP, "--replay", bundle, "lit.py", *args], tmp_path)
    assert again.returncode == 0, again.stderr
    assert "STEP" not in again.stdout
    return " ".join(again.stderr.split())


@pytest.mark.parametrize("acc", [1, 2])
def test_a_closure_holding_its_batch_is_bundled_with_the_batch_that_failed(tmp_path, acc):
    """The failing batch (6: a step's closure, or with two micro-batches a step, the closure's) replays in a fresh
    process, which builds the model and optimizer again: the bundle keeps the model's forwards in that closure's
    evaluation, so it needs no closure (the program's holds batch 0)."""
    first, bundle, args = _trained(tmp_path, acc, bad=5)
    line = marker_line(PROGRAM, "SOFTMAX")
    step = 5 if acc == 1 else 2
    assert f"step {step} · NaN born in softmax, in the forward of att" in first
    assert f"op: softmax at lit.py:{line} " in first
    assert f"tensor_dap.replay('{bundle}', model, optimizer=optimizer)" in first  # no closure to hand over
    again = _replayed(tmp_path, bundle, args)
    assert f"step {step} · replay: NaN born in softmax, in the forward of att" in again
    assert f"op: softmax at lit.py:{line} " in again and "original report said" not in again


def test_a_micro_batch_before_the_closure_fails_in_its_own_step_and_replays(tmp_path):
    """With two micro-batches a step, batch 4 runs outside step() and batch 5 in the closure: batch 4's NaN is
    caught before the closure adds to its gradients, and its bundle (the step's micro-batches so far) replays."""
    first, bundle, args = _trained(tmp_path, 2, bad=4)
    assert "step 2 · NaN born in softmax, in the forward of att" in first
    again = _replayed(tmp_path, bundle, args)
    assert "step 2 · replay: NaN born in softmax, in the forward of att" in again


def test_a_failure_in_the_loss_alone_replays_with_the_runs_op(tmp_path):
    """log(0) through a torch.where: the loss is inf while every gradient is finite. Re-running the closure names
    the op at its own line; the bundle keeps the loss the closure gave, not the loss function, so its replay finds
    the same non-finite loss after finite forwards and backward, and names the run's op and line."""
    first, bundle, args = _trained(tmp_path, 1, log=3)
    line = marker_line(PROGRAM, "LOG")
    assert "step 3 · Inf born in log, outside any module" in first
    assert f"op: log at lit.py:{line} " in first  # the closure's own line: not "in the loss computed before"
    again = _replayed(tmp_path, bundle, args)
    assert "step 3 · replay: Inf born in log, outside any module" in again
    assert f"op: log at lit.py:{line} " in again and "log of zero" in again
    assert "its op and line are the run's" in again and "original report said" not in again
    report = json.loads((tmp_path / bundle / "report.json").read_text())
    assert report["mode"] == "loop" and "near" not in report["source"]


def _closure_steps(acc, bad_micro_batch):
    """Lightning's automatic optimization in process: ``acc`` micro-batches a step, the last in the closure."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for index in range(4 * acc):
        x = torch.randn(8, 4)
        if index == bad_micro_batch:
            x[0, 0] = float("nan")

        def closure(x=x):
            loss = model(x).pow(2).mean() / acc
            loss.backward()
            losses.append(loss.item())
            return loss
        if (index + 1) % acc:
            closure()
            continue
        optimizer.step(closure=closure)
        optimizer.zero_grad()
    return losses


def test_the_step_loss_of_accumulated_micro_batches_adds_the_closures_to_theirs():
    """Each micro-batch's loss is divided by their count before backward(), the closure's too: the step's loss in
    the history is their sum (the mean loss), not the closure's quarter of it."""
    clean = _closure_steps(4, bad_micro_batch=-1)  # the micro-batches' losses, unwatched
    with AutoTriggers(nan=True, on="raise"), pytest.raises(NonFiniteError) as info:
        _closure_steps(4, bad_micro_batch=13)  # step 3's second micro-batch, outside step()
    report = info.value.report
    assert (report.step, report.phase) == (3, "input")
    steps = [sum(clean[i:i + 4]) for i in range(0, 12, 4)]
    assert report.loss_history[:3] == pytest.approx(steps, rel=1e-6)
