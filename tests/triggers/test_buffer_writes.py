"""A NaN/Inf written into a buffer while the step's loss and gradients stay finite (a VQ-VAE's EMA codebook divided by
a code's zero count, a running normalizer fed a log of 0): watch must stop at that step, not at the next one whose
forward reads the buffer, and name the op and line that made the value, the module and the buffer; a -inf mask
buffer must not fire; the numerics stay bit-identical with the buffers checked."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from tensor_dap import NonFiniteError
from tensor_dap.state import Buffers
from tensor_dap.triggers.buffer_writes import watched
from tensor_dap.triggers.sentinel import Sentinel


class _Codebook(nn.Module):
    """A VQ layer whose codes follow an exponential moving average of what they are assigned, with no smoothing of
    the counts (``eps`` 0): a code nothing was assigned to yet divides by a count of 0."""

    def __init__(self, dim: int, codes: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        embed = torch.randn(dim, codes)
        self.register_buffer("embed", embed)
        self.register_buffer("count", torch.zeros(codes))
        self.register_buffer("embed_avg", embed.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dist = x.pow(2).sum(1, keepdim=True) - 2 * x @ self.embed + self.embed.pow(2).sum(0, keepdim=True)
        onehot = F.one_hot(dist.argmin(1), self.embed.shape[1]).type(x.dtype)
        quantized = onehot @ self.embed.t()
        if self.training:
            self.count.data.mul_(0.9).add_(onehot.sum(0), alpha=0.1)
            self.embed_avg.data.mul_(0.9).add_(x.t() @ onehot, alpha=0.1)
            self.embed.data.copy_(self.embed_avg / (self.count + self.eps).unsqueeze(0))
        return x + (quantized - x).detach()


class _VQ(nn.Module):
    def __init__(self, eps: float) -> None:
        super().__init__()
        self.enc, self.vq, self.dec = nn.Linear(6, 4), _Codebook(4, 16, eps), nn.Linear(4, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dec(self.vq(self.enc(x)))


class _Normalized(nn.Module):
    """A running scale of the inputs kept as a buffer (an RL observation normalizer), rebound at each step."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.register_buffer("log_scale", torch.zeros(6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            with torch.no_grad():
                self.log_scale = 0.99 * self.log_scale + 0.01 * x.abs().mean(0).log()  # a feature of zeros: log(0)
        return self.fc(x)


class _Masked(nn.Module):
    """Causal self-attention with its mask a buffer of -inf (nanoGPT's older form): Infs on purpose, every step."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.out = nn.Linear(6, 18), nn.Linear(6, 6)
        self.register_buffer("mask", torch.full((5, 5), float("-inf")).triu(1))
        self.norm = nn.BatchNorm1d(5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        attn = torch.softmax(q @ k.transpose(1, 2) / 6 ** 0.5 + self.mask, dim=-1)
        return self.out(self.norm(attn @ v))


def _batches(n: int, feature_of_zeros_at: int | None = None):
    gen = torch.Generator().manual_seed(2)
    for step in range(n):
        x = torch.randn(8, 6, generator=gen)
        if step == feature_of_zeros_at:
            x[:, 3] = 0.0
        yield step, x


def _train(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor) -> torch.Tensor:
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), x)
    loss.backward()
    optimizer.step()
    return loss


@pytest.mark.parametrize("mode", ["unchanged loop", "w.step"])
def test_a_division_written_into_a_buffer_is_named_at_the_step_that_wrote_it(mode):
    torch.manual_seed(0)
    model = _VQ(eps=0.0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
        for _, x in _batches(4):
            loss = w.step(_train, model, optimizer, x) if mode == "w.step" else _train(model, optimizer, x)
    report = info.value.report
    assert (report.step, report.phase, report.module, report.op) == (0, "forward", "vq", "div"), report
    assert report.source is not None and "self.embed_avg / (self.count + self.eps)" in report.source["text"]
    assert report.loss is not None and report.loss == report.loss  # finite: the buffer is the only casualty
    assert "buffer 'vq.embed'" in report.notes[0]
    assert "division by zero" in (report.diagnosis or "")
    assert mode == "w.step" or "loss" not in locals()


@pytest.mark.parametrize("mode", ["unchanged loop", "w.step"])
def test_a_rebound_buffer_names_its_op_and_a_smoothed_codebook_does_not_fire(mode):
    torch.manual_seed(0)
    model = _Normalized()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
        for _, x in _batches(5, feature_of_zeros_at=2):
            w.step(_train, model, optimizer, x) if mode == "w.step" else _train(model, optimizer, x)
    report = info.value.report
    assert (report.step, report.module, report.op) == (2, "", "log"), report
    assert "buffer 'log_scale'" in report.notes[0]

    torch.manual_seed(0)
    smoothed = _VQ(eps=1e-5)
    optimizer = torch.optim.Adam(smoothed.parameters(), lr=1e-3)
    with tensor_dap.watch(smoothed, optimizer, on="raise", capture=False) as w:
        for _, x in _batches(6):
            _train(smoothed, optimizer, x)
    assert not w.reports


def test_a_minus_inf_mask_buffer_does_not_fire_and_numerics_stay_bit_identical():
    def run(watched_run: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = _Masked()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        gen = torch.Generator().manual_seed(4)
        w = tensor_dap.watch(model, optimizer, on="raise", capture=False) if watched_run else None
        for _ in range(8):
            x = torch.randn(3, 5, 6, generator=gen)
            _train(model, optimizer, x)
        if w is not None:
            assert not w.reports
            w.close()
        return [t.detach().clone() for t in [*model.parameters(), *model.buffers()]]

    plain, watched_run = run(False), run(True)
    assert all(torch.equal(a, b) for a, b in zip(plain, watched_run))


def test_a_buffer_written_between_steps_is_said_so():
    torch.manual_seed(0)
    model = _VQ(eps=1e-5)
    model.register_buffer("ema", torch.zeros(4, 6))  # an EMA of the encoder's weight, kept by the loop
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for step, x in _batches(5):
            _train(model, optimizer, x)
            with torch.no_grad():
                model.ema.mul_(0.9).add_(model.enc.weight / (0.0 if step == 1 else 1.0), alpha=0.1)
    report = info.value.report
    assert (report.step, report.module) == (2, ""), report
    assert "the buffer 'ema' holds NaN/Inf" in report.notes[0] and "between steps" in report.notes[0]


def test_the_bundle_of_a_buffer_write_replays(tmp_path):
    torch.manual_seed(0)
    model = _VQ(eps=0.0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=str(tmp_path)):
        for _, x in _batches(3):
            _train(model, optimizer, x)
    bundle = info.value.report.bundle
    assert bundle is not None
    replayed = tensor_dap.replay(bundle, model, optimizer=optimizer, on="log")
    assert replayed is not None and (replayed.module, replayed.op) == ("vq", "div")


def test_the_sentinel_checks_buffers_within_a_budget_and_sees_a_replaced_one_after_a_refresh():
    model = nn.Sequential(nn.Linear(4, 4))  # 20 parameter elements: the budget is MIN_BUDGET
    model.register_buffer("small", torch.zeros(8))
    model.register_buffer("mask", torch.full((3,), float("-inf")))  # non-finite when read: left out
    model.register_buffer("huge", torch.zeros(1 << 17))  # past the budget: not checked every step
    source = watched(Buffers(model), list(model.parameters()))
    assert source is not None
    assert [b.numel() for b in source()] == [8]
    sentinel = Sentinel()
    sentinel.also(source)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    groups = [list(model.parameters())]
    model.small[0] = float("nan")
    assert sentinel.check_params(groups, 0) is True and sentinel.read() == 0
    model.small = torch.zeros(8)  # rebound: seen at the next check
    assert sentinel.check_params(groups, 1) is False
    model.small[1] = float("nan")
    assert sentinel.check_params(groups, 2) is True and sentinel.read() == 2
    assert watched(Buffers(nn.Linear(2, 2)), []) is None  # no buffer: nothing added to the step

    wide = nn.Linear(2, 2)
    wide.register_buffer("scale", torch.full((3,), 1e300, dtype=torch.float64))  # past float32's range, finite
    sentinel = Sentinel()
    sentinel.also(watched(Buffers(wide), list(wide.parameters())))
    for p in wide.parameters():
        p.grad = torch.zeros_like(p)
    assert sentinel.check_params([list(wide.parameters())], 0) is False  # its sum does not overflow: no alarm

    strided = nn.Linear(2, 2)
    strided.register_buffer("table", torch.zeros(3, 4).t())  # not contiguous: read as it is laid out
    sentinel = Sentinel()
    sentinel.also(watched(Buffers(strided), list(strided.parameters())))
    for p in strided.parameters():
        p.grad = torch.zeros_like(p)
    strided.table[2, 1] = float("nan")
    assert sentinel.check_params([list(strided.parameters())], 0) is True


READ_ONLY_BUFFER = """
import sys, warnings
import numpy as np
import torch
import tensor_dap

warnings.simplefilter("ignore")  # torch warns that the array is not writable: that is the point
path = sys.argv[1]
np.arange(16, dtype=np.float32).tofile(path)
model = torch.nn.Linear(4, 4)
model.register_buffer("table", torch.from_numpy(np.memmap(path, mode="r", dtype=np.float32)))  # a read-only page
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
with tensor_dap.watch(model, optimizer, on="log", capture=sys.argv[2]) as w:
    for step in range(3):
        optimizer.zero_grad()
        x = torch.ones(2, 4) / (0.0 if step == 2 else 1.0)  # a batch of Inf at step 2: the step is re-run
        (model(x) + model.table[:4]).sum().backward()
        optimizer.step()
print("steps", w.step_count, "reports", len(w.reports))
again = tensor_dap.replay(w.reports[0].bundle, model, optimizer=optimizer, on="log")  # the bundle's state loaded
print("replayed", again.op if again is not None else None)
"""


def test_a_buffer_in_read_only_memory_is_checked_without_a_write(tmp_path):
    """The gradients' fused check writes every value back as it was, a re-run puts the buffers back, a replay loads the
    bundle's state; a buffer may live in memory mapped read-only (np.memmap, torch.frombuffer): it is read, never
    written, or the program would crash."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", READ_ONLY_BUFFER, str(tmp_path / "table.bin"), str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "steps 3 reports 1" in run.stdout  # re-run from the saved buffers: the table was not written back
    assert "replayed" in run.stdout  # and a replay loaded the bundle's state around it


def test_a_lazy_model_is_watched_and_its_buffers_checked_once_they_exist():
    """LazyLinear and LazyBatchNorm1d have no shape before their first forward: the watch starts all the same, and
    the BatchNorm's statistics are checked from the step that made them."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.LazyLinear(8), nn.LazyBatchNorm1d(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
        for _ in range(3):
            optimizer.zero_grad()
            model(torch.randn(4, 5)).sum().backward()
            optimizer.step()
        checked = {id(b) for b in w._sentinel.source()}
    assert not w.reports and w.step_count == 3
    assert {id(model[1].running_mean), id(model[1].running_var)} <= checked


class _MaskEachCall(nn.Module):
    """Builds its causal mask again at every forward, as a buffer of -inf above the diagonal (sequences of any
    length): a new tensor each step, deliberate each time."""

    def __init__(self) -> None:
        super().__init__()
        self.qk = nn.Linear(6, 12)
        self.register_buffer("mask", torch.zeros(1, 1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        self.mask = torch.full((n, n), float("-inf")).triu(1)
        q, k = self.qk(x).chunk(2, dim=-1)
        return torch.softmax(q @ k.transpose(1, 2) + self.mask, dim=-1) @ x


@pytest.mark.parametrize("mode", ["unchanged loop", "w.step", "rerun=False"])
def test_a_mask_built_again_at_every_forward_is_dismissed_once_not_re_run_every_step(monkeypatch, mode):
    from tensor_dap.triggers import investigate

    reruns = []
    localize = investigate.localize_rerun
    monkeypatch.setattr(investigate, "localize_rerun", lambda *a, **k: reruns.append(1) or localize(*a, **k))
    torch.manual_seed(0)
    model = _MaskEachCall()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(6)
    with tensor_dap.watch(model, optimizer, on="raise", capture=False, rerun=mode != "rerun=False") as w:
        for _ in range(8):
            x = torch.randn(2, 5, 6, generator=gen)
            w.step(_train, model, optimizer, x) if mode == "w.step" else _train(model, optimizer, x)
    assert not w.reports
    # the first new mask was re-run and found deliberate (with no re-run: Inf and no NaN); its slot is left out since
    assert len(reruns) == (0 if mode == "rerun=False" else 1)


class _LazyScale(nn.Module):
    """Registers its running scale of the inputs at its first forward (their width is known only then), then updates
    it in place; with a ``masked`` causal mask of -inf registered the same way."""

    def __init__(self, masked: bool = False) -> None:
        super().__init__()
        self.fc, self.masked = nn.Linear(6, 6), masked

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if "scale" not in self._buffers:
            self.register_buffer("scale", torch.zeros(x.shape[1]))
            if self.masked:
                self.register_buffer("mask", torch.full((x.shape[0], x.shape[0]), float("-inf")).triu(1))
        if self.training:
            with torch.no_grad():
                self.scale.mul_(0.99).add_(0.01 * x.abs().mean(0).log())  # a feature of zeros: log(0)
        out = self.fc(x)
        return torch.softmax(out @ out.t() + self.mask, dim=-1) @ out if self.masked else out


@pytest.mark.parametrize("mode", ["unchanged loop", "w.step"])
def test_a_buffer_registered_at_the_first_forward_is_checked_too(mode):
    torch.manual_seed(0)
    model = _LazyScale()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
        for _, x in _batches(6, feature_of_zeros_at=3):
            w.step(_train, model, optimizer, x) if mode == "w.step" else _train(model, optimizer, x)
    report = info.value.report
    assert (report.step, report.module, report.op) == (3, "", "log"), report
    assert "buffer 'scale'" in report.notes[0]


def test_a_mask_registered_at_the_first_forward_does_not_fire():
    torch.manual_seed(0)
    model = _LazyScale(masked=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
        for _, x in _batches(6):
            _train(model, optimizer, x)
        checked = {id(b) for b in w._sentinel.source()}
    assert not w.reports
    assert id(model.scale) in checked and id(model.mask) not in checked  # the mask left out, the scale checked


@pytest.mark.parametrize("mode", ["unchanged loop", "w.step"])
def test_batch_norm_running_statistics_overflowing_name_batch_norm(mode):
    """BatchNorm writes its running variance inside the op, by no op of its own: a batch of values near 1e20 (one
    read without its normalization; a run diverging, as pytorch/examples' imagenet at lr 20) overflows it to Inf
    while the output, normalized by it, stays finite. Before, no op was named ("first non-finite value in the
    forward of 1")."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 6))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    def train(x: torch.Tensor) -> None:  # (the batch is no target here: its square would overflow first)
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        optimizer.step()

    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
        for step, x in _batches(4):
            x = x * 1e20 if step == 2 else x
            w.step(train, x) if mode == "w.step" else train(x)
    report = info.value.report
    assert (report.step, report.phase, report.module, report.op) == (2, "forward", "1", "batch_norm"), report
    assert "buffer '1.running_var'" in report.notes[0]
