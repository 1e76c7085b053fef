"""Monitor: event files read back with TensorBoard's reader; diagnostics for planted runs, none for a healthy one."""

from __future__ import annotations

import math
import subprocess
import sys
import time
import urllib.request

import pytest
import torch
import torch.nn.functional as F
from tensorboard.backend.event_processing import event_accumulator as ea
from torch import nn

import tensor_dap
from tensor_dap.profiling import diagnose


def _read(logdir):
    acc = ea.EventAccumulator(str(logdir), size_guidance={ea.SCALARS: 0, ea.HISTOGRAMS: 0, ea.TENSORS: 0})
    acc.Reload()
    return acc


def _texts(acc):
    """The diagnostic texts (add_text stores them as tensors under ``diagnostics/text_summary``)."""
    tags = [t for t in acc.Tags()["tensors"] if t.startswith("diagnostics")]
    return [e.tensor_proto.string_val[0].decode() for t in tags for e in acc.Tensors(t)]


def _data(n=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 10, generator=g)
    return x, (x[:, :1] * 2 - x[:, 1:2]) + 0.1 * torch.randn(n, 1, generator=g)


def test_healthy_run_logs_everything_and_raises_nothing(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = _data()
    vx, vy = _data(seed=1)
    with tensor_dap.Monitor(str(tmp_path), model=model, optimizer=opt, every=50) as m:
        for step in range(1, 301):
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            val = F.mse_loss(model(vx), vy).item() if step % 25 == 0 else None
            m.log(step, loss=loss, val_loss=val)
    assert m.findings == []
    acc = _read(tmp_path)
    scalars = set(acc.Tags()["scalars"])
    assert {"loss/train", "loss/val", "lr/group0", "grad_norm/total", "grad_norm/0.weight", "param_norm/2.bias",
            "update_ratio/0.weight", "dead_relu/1"} <= scalars
    train = acc.Scalars("loss/train")
    assert [e.step for e in train] == list(range(1, 301))
    assert train[-1].value < train[0].value / 2
    assert acc.Scalars("lr/group0")[0].value == pytest.approx(0.05)
    assert [e.step for e in acc.Scalars("param_norm/0.weight")] == [50, 100, 150, 200, 250, 300]
    assert [e.step for e in acc.Scalars("update_ratio/0.weight")][:2] == [51, 101]
    assert 0 < acc.Scalars("update_ratio/0.weight")[0].value < 0.1
    assert {"weights/0.weight", "grads/2.weight"} <= set(acc.Tags()["histograms"])
    hist = acc.Histograms("weights/0.weight")[0].histogram_value
    assert hist.num == 320 and hist.min < 0 < hist.max
    assert _texts(acc) == []


def test_overfitting_run_is_diagnosed(tmp_path):
    """Few samples, a wide net and many steps: train loss falls to ~0 while val loss climbs."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 256), nn.ReLU(), nn.Linear(256, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x = torch.randn(16, 10)
    y = torch.randn(16, 1)  # noise labels: nothing to learn that generalizes
    vx, vy = torch.randn(64, 10), torch.randn(64, 1)
    with tensor_dap.Monitor(str(tmp_path), model=model, optimizer=opt, every=100) as m:
        for step in range(1, 401):
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            m.log(step, loss=loss, val_loss=F.mse_loss(model(vx), vy).item() if step % 10 == 0 else None)
    kinds = {f.kind for f in m.findings}
    assert "overfitting" in kinds, m.findings
    texts = _texts(_read(tmp_path))
    assert any(t.startswith("overfitting: val_loss rose") for t in texts)


@pytest.mark.parametrize("norm_every", [1, None], ids=["norm-every-step", "cpu-default"])
def test_exploding_run_is_diagnosed(tmp_path, caplog, norm_every):
    """A learning rate far too high: gradient norms explode, then turn NaN/Inf within five steps. With the
    total norm every step that is exploding gradients; with the CPU default (a norm every 10 steps, none
    before the NaN) the loss curve names it: diverging."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=2.0)
    x, y = _data()
    with caplog.at_level(logging_level := 30, logger="tensor_dap.monitor"):
        with tensor_dap.Monitor(str(tmp_path), model=model, optimizer=opt, every=10, flush_every=5,
                                norm_every=norm_every) as m:
            assert m.norm_every == (norm_every or 10)
            for step in range(1, 61):
                opt.zero_grad()
                loss = F.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                m.log(step, loss=loss)
    kinds = [f.kind for f in m.findings]
    said = "exploding gradients" if norm_every == 1 else "the loss is diverging"
    assert ("exploding_gradients" if norm_every == 1 else "diverging") in kinds and "nonfinite" in kinds, m.findings
    assert kinds.count("nonfinite") == 1  # reported once, not every flush
    assert any(said in r.getMessage() for r in caplog.records if r.levelno == logging_level)
    texts = _texts(_read(tmp_path))
    assert any(said in t for t in texts) and any("NaN/Inf" in t for t in texts)
    if norm_every is None:
        assert [e.step for e in _read(tmp_path).Scalars("grad_norm/total")][:2] == [10, 20]


def test_curve_checks_on_planted_series():
    flat = [(s, 1.0 + 0.01 * math.sin(s)) for s in range(300)]
    assert diagnose.not_decreasing(flat).kind == "not_decreasing"
    falling = [(s, 2.0 * math.exp(-s / 50) + 0.05) for s in range(300)]
    assert diagnose.not_decreasing(falling) is None and diagnose.oscillating(falling) is None
    bouncing = [(s, 1.0 + (0.6 if (s // 6) % 2 else -0.6)) for s in range(120)]
    assert diagnose.oscillating(bouncing).kind == "oscillating"
    tiny = [(0, 2.0)] + [(s, 1e-5 * (1 + (s % 2))) for s in range(1, 120)]
    assert diagnose.oscillating(tiny) is None  # converged: jitter near zero is not oscillation
    grads = diagnose.gradients(5, {"a.weight": 1e-9, "b.weight": 0.3}, total=0.3)
    assert [f.kind for f in grads] == ["vanishing_gradients"] and "a.weight" in grads[0].message
    spike = diagnose.gradients(30, {}, total=50.0, typical=diagnose.typical_norm([0.2] * 25))
    assert spike[0].kind == "exploding_gradients"
    assert diagnose.typical_norm([1.0] * 19) is None and diagnose.typical_norm(list(range(20))) == 9.5
    assert diagnose.dead_relus(3, {"act": 0.9, "act2": 0.1})[0].message.count("%") == 1
    assert diagnose.nonfinite(1, {"loss/train": float("nan")}).kind == "nonfinite"


def test_dead_relus_are_found(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1))
    with torch.no_grad():
        model[0].bias.fill_(-100.0)  # every unit below zero for any input
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = _data()
    with tensor_dap.Monitor(str(tmp_path), model=model, optimizer=opt, every=5) as m:
        for step in range(1, 12):
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            m.log(step, loss=loss)
    assert "dead_relu" in {f.kind for f in m.findings}
    assert _read(tmp_path).Scalars("dead_relu/1")[0].value == pytest.approx(1.0)


def test_tensorboard_command_serves_on_loopback(tmp_path):
    with tensor_dap.Monitor(str(tmp_path / "runs"), every=10) as m:
        m.log(1, loss=1.0)
    proc = subprocess.Popen([sys.executable, "-m", "tensor_dap", "tensorboard", str(tmp_path / "runs"), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert "http://127.0.0.1:" in line or "http://localhost:" in line, (line, proc.stderr.read(2000))
        url = line.split(" at ", 1)[1].split()[0]
        deadline = time.monotonic() + 60
        while True:
            try:
                assert urllib.request.urlopen(url, timeout=10).status == 200
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_tensorboard_command_errors(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tensor_dap", "tensorboard", str(tmp_path / "none")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.startswith("tensor-dap: error: no such log folder")
    assert len(r.stderr.strip().splitlines()) == 1


def _hist(tmp_path, tag, x, every_tag="weights"):
    """``x`` logged through a Monitor as the weight of a one-parameter model, read back from the event file."""
    model = nn.Module()
    model.w = nn.Parameter(x.clone(), requires_grad=True)
    with tensor_dap.Monitor(str(tmp_path / tag), model=model, every=1) as m:
        m.log(1, loss=1.0)
    return _read(tmp_path / tag).Histograms(f"{every_tag}/w")[0].histogram_value


def test_histograms_from_event_files_are_right_on_large_tensors(tmp_path):
    """Buckets come from a strided sample above 2**15 values; count, range and sums stay exact, buckets close."""
    torch.manual_seed(0)
    x = torch.randn(256, 784)  # 200,704 values: sampled
    h = _hist(tmp_path, "big", x)
    assert h.num == x.numel()
    assert sum(h.bucket) == pytest.approx(x.numel(), rel=1e-9)
    assert (h.min, h.max) == (x.min().item(), x.max().item())
    assert h.sum == pytest.approx(x.double().sum().item(), abs=1e-6 * x.abs().sum().item())
    assert h.sum_squares == pytest.approx(x.double().square().sum().item(), rel=1e-6)
    exact = torch.histc(x, bins=len(h.bucket), min=h.min, max=h.max)
    assert list(h.bucket_limit)[-1] == pytest.approx(h.max)
    for got, want in zip(h.bucket, exact.tolist()):  # ~3 % noise in the big buckets, absolute in the tails
        assert abs(got - want) <= 0.1 * want + 60


def test_histogram_sample_sees_every_column(tmp_path):
    """A weight whose columns differ (zero inputs: zero gradient columns): a stride dividing the row length
    would sample the same columns of every row and get the share of zeros wrong."""
    x = torch.ones(256, 784)
    x[:, ::7] = 0.0  # every 7th column zero: 1/7 of the values
    h = _hist(tmp_path, "cols", x)
    assert h.num == x.numel() and (h.min, h.max) == (0.0, 1.0)
    assert h.bucket[0] == pytest.approx(x.numel() / 7, rel=0.05)
    assert h.bucket[-1] == pytest.approx(x.numel() * 6 / 7, rel=0.05)


def test_histograms_leave_out_nan_and_inf(tmp_path):
    x = torch.arange(100_000, dtype=torch.float32)
    x[5], x[70_000], x[99_999] = math.nan, math.inf, -math.inf
    finite = x[torch.isfinite(x)]
    h = _hist(tmp_path, "nan", x)
    assert h.num == finite.numel() == 99_997
    assert (h.min, h.max) == (0.0, 99_998.0)
    assert sum(h.bucket) == pytest.approx(99_997, rel=1e-9)
    assert h.sum == pytest.approx(finite.double().sum().item(), rel=1e-6)
    constant = _hist(tmp_path, "const", torch.full((10,), 3.0))  # one value: all in the first bucket
    assert constant.num == 10 and (constant.min, constant.max) == (3.0, 3.0) and constant.bucket[0] == 10
    model = nn.Module()
    model.w = nn.Parameter(torch.full((4,), math.nan))
    model.e = nn.Parameter(torch.zeros(0))
    with tensor_dap.Monitor(str(tmp_path / "none"), model=model, every=1) as m:  # nothing finite: no histogram
        m.log(1, loss=1.0)
    assert not {"weights/w", "weights/e"} & set(_read(tmp_path / "none").Tags()["histograms"])


def test_total_gradient_norm_is_clip_grad_norms(tmp_path):
    """Per-gradient norms stay on the device each step; their 2-norm is made at the flush (mixed dtypes too)."""
    model = nn.Module()
    model.a = nn.Parameter(torch.zeros(300, 200))
    model.b = nn.Parameter(torch.zeros(7, dtype=torch.float64))
    expected = []
    with tensor_dap.Monitor(str(tmp_path), model=model, every=1000, flush_every=3, norm_every=1) as m:
        for step in range(1, 6):
            model.a.grad = torch.randn(300, 200) * step
            model.b.grad = torch.randn(7, dtype=torch.float64)
            expected.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), math.inf, norm_type=2.0)))
            m.log(step, loss=1.0 / step)
    got = [e.value for e in _read(tmp_path).Scalars("grad_norm/total")]
    assert got == pytest.approx(expected, rel=1e-5)


def test_total_gradient_norm_is_sampled_every_norm_every_steps_and_bad_values_are_refused(tmp_path):
    model = nn.Linear(3, 1)
    with tensor_dap.Monitor(str(tmp_path), model=model, every=1000, norm_every=4) as m:
        for step in range(1, 13):
            model.weight.grad = torch.ones(1, 3) * step
            m.log(step, loss=1.0)
    assert [e.step for e in _read(tmp_path).Scalars("grad_norm/total")] == [4, 8, 12]
    for bad in ({"norm_every": 0}, {"every": 0}, {"flush_every": -1}, {"norm_every": 2.5}):
        with pytest.raises(ValueError, match="positive integer"):
            tensor_dap.Monitor(str(tmp_path / "x"), model=model, **bad)


def test_a_loss_that_blows_up_between_two_gradient_norms_is_diverging():
    assert diagnose.diverging(3, 2.3e5, lowest=2.8, first=4.6).kind == "diverging"
    assert diagnose.diverging(3, 50.0, lowest=2.8, first=4.6) is None  # 18x: noise of an early run, not a blow-up
    assert diagnose.diverging(9, 3e-3, lowest=1e-6, first=2.3) is None  # 1000x of ~0 is still far below the start
    assert diagnose.diverging(2, 1e9, lowest=None, first=1.0) is None  # nothing to compare with yet
    assert diagnose.diverging(4, float("inf"), lowest=1.0, first=1.0) is None  # NaN/Inf: the nonfinite check's
    # pytorch/examples word_language_model at --lr 20000: cross-entropy 9.8, then 1734.5 (and ~9000 later)
    assert diagnose.diverging(2, 1734.5, lowest=9.8, first=9.8).kind == "diverging"


def test_a_loss_that_blew_up_and_stays_up_is_diverging():
    """nanoGPT at lr 5: cross-entropy 4.5, then 40-170 for the rest of the run, never 100× its lowest."""
    assert diagnose.diverging(12, 100.0, lowest=3.5, first=4.5, risen_for=diagnose.STAYED).kind == "diverging"
    assert diagnose.diverging(12, 100.0, lowest=3.5, first=4.5, risen_for=diagnose.STAYED - 1) is None
    assert diagnose.risen(100.0, 3.5, 4.5) and not diagnose.risen(30.0, 3.5, 4.5)  # 8.6×: not risen
    assert not diagnose.risen(0.8, 0.05, 2.3)  # a warm restart from a converged 0.05: far below the start
    assert not diagnose.risen(float("nan"), 1.0, 1.0) and not diagnose.risen(5.0, None, 1.0)


def _blown_up_run(tmp_path, lr, steps=80):
    """A real classifier on fresh batches whose learning rate sends its loss far up, where it stays (Adam at a huge
    lr keeps its steps bounded, so nothing turns NaN), with the monitor's every-step train losses."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    rule = torch.randn(20, 10)
    losses = []
    with tensor_dap.Monitor(str(tmp_path), model=model, optimizer=opt, every=20, flush_every=5) as m:
        for step in range(1, steps + 1):
            x = torch.randn(64, 20)
            y = (x @ rule).argmax(1)
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
            m.log(step, loss=loss)
    return m, losses


def test_a_run_that_blows_up_and_stays_up_is_named_once(tmp_path):
    m, losses = _blown_up_run(tmp_path, lr=1.0)
    assert all(map(math.isfinite, losses)) and max(losses) < 100 * min(losses)  # what the 100× rule missed
    found = [f for f in m.findings if f.kind == "diverging"]
    assert len(found) == 1 and "for 10 values in a row" in found[0].message, m.findings
    assert all(loss > 10 * min(losses[:found[0].step - 10]) for loss in losses[found[0].step - 10:found[0].step])
    assert any("the loss is diverging" in t for t in _texts(_read(tmp_path)))
    healthy, _ = _blown_up_run(tmp_path / "healthy", lr=1e-3)
    assert not [f for f in healthy.findings if f.kind == "diverging"], healthy.findings


def test_a_run_that_never_closes_its_monitor_keeps_its_last_steps(tmp_path):
    """The program ends with values pending since the last flush: they are written at exit."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch, tensor_dap\n"
        "m = tensor_dap.Monitor(r'%s', every=100)\n"
        "for step in range(1, 8):\n"
        "    m.log(step, loss=torch.tensor(1.0 / step))\n" % (tmp_path / "runs"))
    subprocess.run([sys.executable, str(script)], check=True, timeout=120)
    assert [e.step for e in _read(tmp_path / "runs").Scalars("loss/train")] == list(range(1, 8))
