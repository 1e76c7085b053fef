"""The Variables panel stays responsive whatever is in the frame: the real debugpy adapter, real DAP.

The frame (tests/debuggees/debuggee_renderers_huge.py) holds what used to freeze it: a 20,000-entry
ParameterList (17.9 s to expand), a 10,000-module model, a dict batch of 50,000 tensors, broadcast
attention masks (3-4 s per frame), unfold patches. Timings are asserted with room for a loaded CI
machine; benchmarks/bench_debugger.py measures the hard numbers (< 0.5 s each).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from dapclient import DapClient

pytest.importorskip("debugpy")
pytestmark = pytest.mark.timeout(300)

SCRIPT = Path(__file__).resolve().parents[1] / "debuggees" / "debuggee_renderers_huge.py"
GENEROUS_S = 5.0  # the target is 0.5 s; the shared CI machine gets ten times that


@pytest.fixture(scope="module")
def stopped():
    dap = DapClient.launch(str(SCRIPT), timeout=120)
    try:
        line = next(n for n, text in enumerate(SCRIPT.read_text().splitlines(), 1) if "# BP" in text)
        dap.set_breakpoints(str(SCRIPT), [line])
        dap.configuration_done(timeout=120)
        dap.wait_for_event("stopped", timeout=180)
        frame = dap.stack_trace(dap.stopped_thread, levels=1)[0]
        scope = next(s for s in dap.scopes(frame["id"]) if s["name"] == "Locals")
        yield dap, frame["id"], scope["variablesReference"]
    finally:
        dap.close()


def _timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def _expand(dap, var):
    """The children of one variable, asserting they came within the generous bound."""
    kids, seconds = _timed(lambda: dap.variables(var["variablesReference"]))
    assert seconds < GENEROUS_S, (var["name"], seconds)
    return kids


def test_frame_and_value_lines(stopped):
    dap, _, ref = stopped
    variables, seconds = _timed(lambda: dap.variables(ref))
    assert seconds < GENEROUS_S
    v = {x["name"]: x["value"] for x in variables}
    assert v["plist"].startswith("ParameterList(20000) ") and "params" in v["plist"]
    assert v["wide"].startswith("Sequential(10000) ")
    assert v["mask"] == "tensor[32, 16, 2048, 2048] expanded n=2147483648 (8.0 GiB) x∈[1, 1] μ=1 σ=0"
    assert v["patches"].startswith("tensor[1, 3, 209, 209, 16, 16] n=33547008 (128 MiB) x")
    assert v["batches"].startswith("[(tensor[32, 784], tensor[32] i64), (tensor[32, 784], tensor[32] i64)")
    assert re.search(r"\), … 9\d more\]$", v["batches"])
    assert v["scaler"] == "GradScaler scale=1024 (initial: not used yet) growth ×2 every 50 steps backoff ×0.5"
    assert v["gen"] == "Generator cpu seed=1234"
    assert v["huge_batch"].startswith("{'x0': tensor[3], 'x1': tensor[3]") and v["huge_batch"].endswith("more}")


def test_a_20000_entry_parameter_list_opens_one_page_at_a_time(stopped):
    dap, frame_id, ref = stopped
    kids = _expand(dap, next(x for x in dap.variables(ref) if x["name"] == "plist"))
    names = [k["name"] for k in kids]
    assert names[:3] == ["0", "1", "2"] and names[99] == "99" and names[100] == "… 19,900 more"
    assert kids[0]["value"].startswith("Parameter[4] x∈[")
    assert kids[0]["evaluateName"] == "plist[0]"
    ranges = _expand(dap, kids[100])
    assert [r["name"] for r in ranges] == ["[100..10099]", "[10100..19999]"]  # at most 100 children per node
    pages = dap.variables(ranges[-1]["variablesReference"])
    assert len(pages) == 99 and pages[0]["name"] == "[10100..10199]" and pages[-1]["name"] == "[19900..19999]"
    last = _expand(dap, pages[-1])
    assert len(last) == 100 and last[-1]["name"] == "19999"
    assert last[-1]["evaluateName"] == "plist[19999]"  # Add to Watch still names the entry
    watched = dap.evaluate(last[-1]["evaluateName"], frame_id, context="watch")["result"]
    assert watched == last[-1]["value"]


def test_a_10000_module_model_and_its_summary_children(stopped):
    dap, _, ref = stopped
    kids = _expand(dap, next(x for x in dap.variables(ref) if x["name"] == "wide"))
    names = [k["name"] for k in kids]
    assert names[:2] == ["0", "1"] and "… 9,900 more" in names and "params" in names and "hooks" in names
    assert len(kids) < 120


def test_masks_and_activations_render_fast_together(stopped):
    """Four broadcast masks next to 16 activations: 3-3.6 s before (the thrifty budget made masks slower)."""
    dap, _, ref = stopped
    for name in ("masks", "acts"):
        kids = _expand(dap, next(x for x in dap.variables(ref) if x["name"] == name))
        assert all(("expanded" in k["value"]) == (name == "masks") for k in kids if k["name"].isdigit())


# ---------------------------------------------------------------------------- the pure parts, directly


def test_module_views_run_no_user_code():
    import torch
    from torch import nn

    from tensor_dap.dap import expand, values

    calls = []

    class Sneaky(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)
            self.register_buffer("steps", torch.zeros(1))

        def parameters(self, recurse=True):
            calls.append("parameters")
            return super().parameters(recurse)

        def named_modules(self, *args, **kwargs):
            calls.append("named_modules")
            return super().named_modules(*args, **kwargs)

        def children(self):
            calls.append("children")
            return super().children()

        def extra_repr(self):
            calls.append("extra_repr")
            return "sneaky"

        def __len__(self):
            calls.append("len")
            return 1

    m = nn.Sequential(Sneaky(), nn.ReLU())
    line = values.value_text(m, "module")
    kids = {name: value for name, value, _ in expand.children(m[0], "module")}
    assert line == "Sequential(2) 12 params f32 cpu train" and set(kids) >= {"fc", "steps", "params", "hooks"}
    assert values.value_text(m[0], "module") == "Sneaky 12 params f32 cpu train"
    assert calls == []


def test_summaries_of_huge_containers_stop_at_the_budget():
    import time

    import torch
    from torch import nn

    from tensor_dap.dap import expand, values
    from tensor_dap.summary import Budget

    plist = nn.ParameterList([nn.Parameter(torch.randn(2)) for _ in range(20_000)])
    opt = torch.optim.SGD(plist, lr=0.1)
    budget = Budget(max_ms=5.0)
    start = time.perf_counter()
    line = values.value_text(plist, "module", budget=budget)
    kids = expand.children(plist, "module", budget)
    opt_line = values.value_text(opt, "optimizer", budget=budget)
    assert time.perf_counter() - start < 2.0  # 20,000 of everything, each bounded by the 5 ms budget
    assert line.startswith("ParameterList(20000) ") and "+ params" in line
    assert "+ params" in opt_line and len(kids) < 110 and kids[100][0] == "… 19,900 more"
    assert values.value_text(plist, "module") == "ParameterList(20000) 40,000 params f32 cpu train"  # no limit


def test_a_slow_dataset_len_is_asked_once():
    import time

    import torch

    from tensor_dap.summary.objects import describe_loader

    calls = []

    class Slow(torch.utils.data.Dataset):
        def __len__(self):
            calls.append(1)
            time.sleep(0.1)
            return 10

        def __getitem__(self, i):
            return i

    loader = torch.utils.data.DataLoader(Slow(), batch_size=2)
    first, second = describe_loader(loader), describe_loader(loader)
    assert first.dataset_len == 10 and second.dataset_len is None and second.batches is None
    assert len(calls) == 1 and "(len ?)" in str(second)
    other = describe_loader(torch.utils.data.DataLoader(list(range(6)), batch_size=2))
    assert other.batches == 3  # other loaders are still asked
