"""Timer aggregation (host clock; CUDA events by structure), StepProfiler phases and advice, setup_logging."""

from __future__ import annotations

import io
import logging
import math
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from tensor_dap.profiling.clock import Clock
from tensor_dap.profiling.timer import Timer, Timers


def test_timer_aggregates_per_name_as_context_and_decorator():
    reg = Timers()
    for d in (0.01, 0.02, 0.03):
        with Timer("sleep", device="cpu", registry=reg):
            time.sleep(d)

    @Timer("fn", device="cpu", registry=reg)
    def f(x):
        return x + 1

    assert [f(i) for i in range(4)] == [1, 2, 3, 4]
    stats = reg.stats()
    assert stats["sleep"].count == 3 and stats["fn"].count == 4
    assert 0.06 <= stats["sleep"].total < 1.0
    assert stats["sleep"].mean == pytest.approx(stats["sleep"].total / 3)
    assert 0.02 <= stats["sleep"].p50 < stats["sleep"].p95
    out = io.StringIO()
    reg.report(out)
    assert "sleep" in out.getvalue() and "p95" in out.getvalue()


def test_public_names():
    assert isinstance(tensor_dap.timers, Timers) and tensor_dap.Timer is Timer
    assert callable(tensor_dap.profile) and tensor_dap.profile(len) is len  # a no-op outside --mode line
    tensor_dap.step()  # a no-op when nothing listens


class _Event:
    """Stand-in for torch.cuda.Event (no GPU here): completes ``lag`` queries after it is recorded."""

    clock = 0.0

    def __init__(self):
        self.t = None
        self.queries = 0
        self.synced = False

    def record(self):
        _Event.clock += 0.005
        self.t = _Event.clock

    def query(self):
        self.queries += 1
        return self.queries > 1

    def synchronize(self):
        self.synced = True

    def elapsed_time(self, end):
        return (end.t - self.t) * 1000.0


def test_cuda_event_spans_are_read_only_when_asked():
    """The event logic, by structure: nothing waits until stats() reads the spans."""
    reg = Timers()
    timer = Timer("gpu", registry=reg, clock=Clock(events=_Event))
    for _ in range(3):
        with timer:
            pass
    pending = reg._series["gpu"].pending
    assert len(pending) == 3 and not any(s.end.synced for s in pending)
    stats = reg.stats()["gpu"]
    assert stats.count == 3 and stats.total == pytest.approx(0.015)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the fallback is for machines without CUDA")
def test_a_cuda_timer_without_cuda_times_wall_time_and_says_so():
    reg = Timers()
    with pytest.warns(RuntimeWarning, match=r"Timer\(device='cuda'\): CUDA is not available.*wall time"):
        timer = Timer("c", device="cuda", registry=reg)
    with timer:
        time.sleep(0.02)
    assert 0.02 <= timer.elapsed < 1.0 and reg.stats()["c"].count == 1


def test_an_unknown_timer_device_is_a_value_error():
    with pytest.raises(ValueError, match="'cuda', 'cpu' or None.*'gpu'"):
        Timer("c", device="gpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_timer_measures_gpu_time():
    reg = Timers()
    x = torch.randn(4096, 4096, device="cuda")
    with Timer("matmul", device="cuda", registry=reg) as t:
        x @ x
    assert t.elapsed > 0 and reg.stats()["matmul"].count == 1


def _loop(sp, loader, model, opt, slow=0.0):
    for x, y in sp.loader(loader):
        if slow:
            time.sleep(slow)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


def test_step_profiler_splits_the_step_and_advises_on_a_slow_loader():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    class SlowData(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            time.sleep(0.004)
            return torch.randn(8), i % 2

    loader = torch.utils.data.DataLoader(SlowData(), batch_size=8)
    sp = tensor_dap.StepProfiler(model, opt)
    _loop(sp, loader, model, opt)
    b = sp.breakdown()
    assert b.steps == 7  # 8 batches, the first skipped
    assert all(b.seconds[p] > 0 for p in ("data", "forward", "backward", "optimizer"))
    assert sum(b.seconds.values()) == pytest.approx(b.total, rel=1e-6)
    assert b.fraction("data") > 0.3  # 8 sleeps of 4 ms a batch against a tiny model
    advice = sp.advice()
    assert advice and "num_workers=0" in advice[0]
    out = io.StringIO()
    sp.report(out)
    assert "data" in out.getvalue() and "advice:" in out.getvalue()
    sp.remove()
    assert not model._forward_hooks and not opt._optimizer_step_post_hooks


def test_step_profiler_gives_no_advice_when_compute_dominates():
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(torch.randn(8, 8), torch.randint(0, 2, (8,))) for _ in range(6)]
    sp = tensor_dap.StepProfiler(model, opt)
    _loop(sp, data, model, opt, slow=0.01)  # the sleep is in the loop body, not in loading
    assert sp.breakdown().fraction("data") < 0.3 and sp.advice() == []
    assert not math.isnan(sp.breakdown().fraction("other"))


def test_setup_logging_is_idempotent_and_writes_a_plain_file(tmp_path):
    path = tmp_path / "logs" / "training.log"
    name = "tensor_dap_test_logger"
    logger = tensor_dap.setup_logging(path, logger=name)
    tensor_dap.setup_logging(path, logger=name)
    ours = [h for h in logger.handlers if getattr(h, "_tensor_dap_handler", False)]
    assert len(ours) == 2  # one console and one file handler, however often it is called
    logger.warning("loss is %s", "NaN [bold]")
    for h in ours:
        h.flush()
    line = path.read_text().strip().splitlines()[-1]
    assert "WARNING" in line and "tensor_dap_test_logger: loss is NaN [bold]" in line
    assert line[:4].isdigit()  # starts with the date
    for h in ours:
        logger.removeHandler(h)
        h.close()
    logging.captureWarnings(False)
