"""What a bundle keeps of the model's inputs, and how it replays in a fresh process (``tensor-dap run --replay``).

An RNN's ``PackedSequence`` is torch's own class: it stays in ``state.pt``, which a safe load reads, so the bundle
replays with no trust asked. A batch of the program's own class (a namedtuple it defines) can only be unpickled,
which runs code: the bundle keeps it in ``objects.pt`` and replays only with ``--trust``.
"""

import os
import subprocess
import sys

import pytest
import torch

TENSOR_DAP = [sys.executable, "-m", "tensor_dap", "run"]

PROGRAM = '''
import collections, sys
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence

Batch = collections.namedtuple("Batch", "tokens lengths")


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.rnn = nn.LSTM(8, 8, batch_first=True)
        self.score = nn.Linear(8, 1)
        self.head = nn.Linear(8, 3)

    def forward(self, packed, lengths=None):
        if isinstance(packed, Batch):
            packed, lengths = pack_padded_sequence(packed.tokens, packed.lengths, batch_first=True,
                                                   enforce_sorted=False), packed.lengths
        data = nn.utils.rnn.PackedSequence(self.emb(packed.data), packed.batch_sizes, packed.sorted_indices,
                                           packed.unsorted_indices)
        out, _ = pad_packed_sequence(self.rnn(data)[0], batch_first=True)
        mask = torch.arange(out.shape[1])[None, :] < (lengths[:, None] - 1)  # drops each sequence's last token
        scores = self.score(out).squeeze(-1).masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=1)  # BORN: a sequence of one token has no position left
        return self.head((weights[..., None] * out).sum(1))


torch.manual_seed(0)
model = Classifier()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
gen = torch.Generator().manual_seed(1)
for step in range(6):
    lengths = torch.randint(2, 6, (4,), generator=gen)
    if step == 3:
        lengths[2] = 1
    tokens = pad_sequence([torch.randint(0, 20, (int(n),), generator=gen) for n in lengths], batch_first=True)
    if sys.argv[1] == "packed":
        out = model(pack_padded_sequence(tokens, lengths, batch_first=True, enforce_sorted=False), lengths)
    else:
        out = model(Batch(tokens, lengths))
    loss = nn.functional.cross_entropy(out, torch.zeros(4, dtype=torch.long))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("TRAINING-DONE")
'''


def _run(args, cwd):
    return subprocess.run([*TENSOR_DAP, *args], cwd=cwd, capture_output=True, text=True, timeout=180,
                          stdin=subprocess.DEVNULL)


def _first_run(tmp_path, kind):
    (tmp_path / "train.py").write_text(PROGRAM)
    first = _run(["--break-on-nan", "train.py", kind], tmp_path)
    bundles = sorted((tmp_path / ".tensor_dap" / "incidents").iterdir())
    assert first.returncode == 1 and len(bundles) == 1, first.stderr
    line = next(n for n, text in enumerate(PROGRAM.splitlines(), 1) if "# BORN" in text)
    assert "step 3 · NaN born in softmax" in first.stderr and f"op: softmax at train.py:{line} " in first.stderr
    return bundles[0], line


def test_a_packed_sequence_input_stays_in_safe_types_and_replays_without_trust(tmp_path):
    if not hasattr(torch.serialization, "safe_globals"):
        pytest.skip("torch before 2.5 cannot be told that a safe load may build a PackedSequence")
    bundle, line = _first_run(tmp_path, "packed")
    assert not (bundle / "objects.pt").exists()
    with pytest.raises(Exception, match="PackedSequence"):  # a safe load builds it only when told it may
        torch.load(bundle / "state.pt", weights_only=True)
    with torch.serialization.safe_globals([torch.nn.utils.rnn.PackedSequence]):
        forwards = torch.load(bundle / "state.pt", weights_only=True)["forwards"]
    assert type(forwards[0]["args"][0]) is torch.nn.utils.rnn.PackedSequence
    again = _run(["--replay", str(bundle), "train.py", "packed"], tmp_path)
    assert again.returncode == 0, again.stderr
    assert "step 3 · replay: NaN born in softmax" in again.stderr and f"op: softmax at train.py:{line} " in again.stderr


def test_a_batch_of_the_program_s_own_class_replays_only_with_trust(tmp_path):
    bundle, line = _first_run(tmp_path, "batch")
    assert (bundle / "objects.pt").exists()
    refused = _run(["--replay", str(bundle), "train.py", "batch"], tmp_path)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    last = refused.stderr.strip().splitlines()[-1]
    assert "objects.pt" in last and "--trust" in last and "TRAINING-DONE" not in refused.stdout
    again = _run(["--replay", str(bundle), "--trust", "train.py", "batch"], tmp_path)
    assert again.returncode == 0, again.stderr
    assert "step 3 · replay: NaN born in softmax" in again.stderr and f"op: softmax at train.py:{line} " in again.stderr


class _Pool(torch.nn.Module):
    def forward(self, x):  # a jagged batch of sequences -> one vector each
        return torch.stack([t.mean(0) for t in x.unbind()])


class _Sequences(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj, self.pool, self.head = torch.nn.Linear(8, 8), _Pool(), torch.nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.pool(torch.sqrt(self.proj(x))))  # BORN: sqrt of a negative projection


def test_a_jagged_nested_batch_is_localized_and_stays_in_safe_types(tmp_path, monkeypatch):
    """A batch of sequences as a jagged nested tensor: the NaN born in ``sqrt`` on it was blamed on ``unbind`` in
    ``pool`` (a nested tensor read as finite), and the bundle needed --trust (objects.pt) for torch's own class."""
    import inspect

    import tensor_dap
    from tensor_dap import NonFiniteError

    monkeypatch.chdir(tmp_path)  # (the bundle goes under .tensor_dap/incidents here)
    torch.manual_seed(0)
    model = _Sequences()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.nested.nested_tensor([torch.randn(3, 8), torch.randn(5, 8)], layout=torch.jagged)
    with pytest.raises(NonFiniteError) as info, \
            tensor_dap.watch(model, optimizer, on="raise"):
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        optimizer.step()
    report = info.value.report
    assert (report.phase, report.module, report.op) == ("forward", "", "sqrt"), report
    source, first = inspect.getsourcelines(_Sequences)
    assert report.source["line"] == first + next(i for i, text in enumerate(source) if "# BORN" in text)
    assert report.bundle and not os.path.exists(os.path.join(report.bundle, "objects.pt"))
    forwards = torch.load(os.path.join(report.bundle, "state.pt"), weights_only=True)["forwards"]
    assert forwards[0]["args"][0].is_nested and torch.equal(forwards[0]["args"][0].values(), x.values())
