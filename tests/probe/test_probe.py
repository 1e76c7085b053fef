"""The pure logic behind the debugger's commands, tested directly (the shell is tested in test_pdb_session.py)."""

import io
import sys
import math
import re

import pytest
import torch
import tensor_dap
from torch import nn

from tensor_dap.console import make_console
from tensor_dap.summary.histogram import histogram
from tensor_dap.probe.display import tensor_view
from tensor_dap.probe.grads import find_module, grad_report
from tensor_dap.probe.memory import memory_report
from tensor_dap.probe.scan import nonfinite_rows, reachable_tensors, tensor_rows
from tensor_dap.probe.shapes import ShapesUsageError, call_args, shape_flow, split_args
from tensor_dap.debug.views import nonfinite as render_nonfinite
from tensor_dap.debug.views import shape_flow as render_shape_flow
from tensor_dap.summary.line import one_line
from tensor_dap.summary import TensorSummary

pytestmark = pytest.mark.timeout(60)


def test_view_of_tensor_container_and_plain_values():
    x = torch.arange(12.0).reshape(3, 4)
    single = tensor_view(x)
    assert single.single is not None and one_line(single.single).startswith("tensor[3, 4]")
    batch = tensor_view({"x": x, "meta": {"ids": [1, 2], "mask": x > 3}, "name": "b"})
    keys = [k for k, _ in batch.rows]
    assert keys == ["['x']", "['meta']['ids']", "['meta']['mask']", "['name']"]
    assert isinstance(batch.rows[0][1], TensorSummary) and batch.rows[1][1] == "[1, 2]"
    assert "bool" in one_line(batch.rows[2][1])
    assert tensor_view([1, 2, 3]) is None and tensor_view("text") is None
    assert tensor_view(nn.Linear(2, 2)).line == "Linear(2→2) 6 params f32 cpu train"  # what VS Code shows
    many = tensor_view([torch.zeros(1)] * 100)
    assert len(many.rows) == 64 and many.more == 36


def test_plain_values_beside_tensors_cost_one_line_however_large():
    """A text batch beside its ids: the strings are written only as far as the row shows, an int past what
    Python writes is named by its length, and a user's object keeps its own repr."""
    class Doc:
        def __repr__(self):
            return "Doc(\n  'a'\n)"

    view = tensor_view({"ids": torch.zeros(2, 3), "text": ["some document " * 40] * 200_000, "seed": 10 ** 5000,
                        "doc": Doc()})
    rows = dict(view.rows)
    assert rows["['text']"].startswith("['some document some") and rows["['text']"].endswith("…")
    assert len(rows["['text']"]) == 80 and rows["['seed']"] == "<int of about 5001 digits>"
    assert rows["['doc']"] == "Doc( 'a' )"  # its own repr, on one line


def test_reachable_tensors_dedups_and_walks_modules_self_and_grads():
    model = nn.Linear(3, 2)
    model(torch.randn(4, 3)).sum().backward()
    x = torch.ones(2)

    class Trainer:
        def __init__(self):
            self.buffer = [x, torch.zeros(1)]

    found, extra = reachable_tensors({"x": x, "alias": x, "model": model, "self": Trainer()}, grads=True)
    names = [n for n, _ in found]
    assert names == ["x", "model.weight", "model.weight.grad", "model.bias", "model.bias.grad", "self.buffer[1]"]
    assert extra == 0
    few, extra = reachable_tensors({"model": model, "x": x}, limit=1)
    assert len(few) == 1 and extra == 2
    assert [n for n, _ in reachable_tensors({"model": model, "x": x}, modules=False)[0]] == ["x"]


def test_tensor_rows_flag_nonfinite_other_device_and_grad():
    bad = torch.tensor([1.0, float("inf")])
    rows = {r.name: r.flags for r in tensor_rows([
        ("a", torch.zeros(2)), ("b", torch.ones(3)), ("bad", bad),
        ("w", torch.zeros(2, requires_grad=True)), ("m", torch.zeros(2, device="meta"))])}
    assert rows["bad"] == ("NaN/Inf",)
    assert rows["m"] == ("other device",)
    assert rows["w"] == ("requires_grad",)
    assert rows["a"] == ()
    single_device = tensor_rows([("m", torch.zeros(2, device="meta"))])
    assert single_device[0].flags == ()  # nothing to disagree with


def test_nonfinite_rows_worst_first():
    a = torch.zeros(100)
    a[0] = float("nan")  # 1%
    b = torch.zeros(10)
    b[:5] = float("-inf")  # 50%
    rows = nonfinite_rows([("a", a), ("fine", torch.ones(3)), ("b", b)])
    assert [(r.name, r.bad) for r in rows] == [("b", 5), ("a", 1)]
    assert rows[0].fraction == pytest.approx(0.5)


def test_grad_report_flags_and_total_norm():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2))
    model[3].bias.requires_grad_(False)
    model(torch.randn(8, 4)).pow(2).sum().backward()
    model[0].weight.grad.mul_(1e6)
    model[0].bias.grad.zero_()
    model[1].weight.grad.mul_(1e-12)
    model[1].bias.grad[0] = float("nan")
    model[2].weight.grad = None
    report = grad_report(model, "model")
    flags = {r.name: r.flag for r in report.rows}
    assert flags["0.weight"] == "exploding" and flags["0.bias"] == "zero"
    assert flags["1.weight"] == "vanishing" and flags["1.bias"] == "NaN/Inf"
    assert flags["2.weight"] == "no grad" and flags["2.bias"] == ""
    assert "3.bias" not in flags and report.frozen == 1
    assert math.isnan(report.total_norm)
    model[1].bias.grad.zero_()
    expected = torch.linalg.vector_norm(torch.stack(
        [p.grad.norm() for p in model.parameters() if p.grad is not None])).item()
    assert grad_report(model).total_norm == pytest.approx(expected, rel=1e-5)
    assert find_module({"x": 1, "net": model, "self": object()}) == ("net", model)
    assert find_module({"x": 1}) is None


def _bn_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Dropout(0.5), nn.Flatten(), nn.Linear(144, 5))


def test_shape_flow_records_every_layer_and_leaves_state_untouched():
    model = _bn_model().train()
    model[2].eval()  # mixed modes must come back as they were
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(2, 3, 8, 8)
    rng = torch.random.get_rng_state()
    flow = shape_flow(model, *call_args(x))
    assert flow.error is None
    by_name = {r.name: r for r in flow.rows}
    assert [r.kind for r in flow.rows] == ["Sequential", "Conv2d", "BatchNorm2d", "Dropout", "Flatten", "Linear"]
    assert by_name["0"].output == "[2, 4, 6, 6]" and by_name["3"].output == "[2, 144]"
    assert by_name[""].output == "[2, 5]" and by_name["4"].params == 144 * 5 + 5
    assert flow.total_params == sum(p.numel() for p in model.parameters())
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert [m.training for m in model.modules()] == [True, True, True, False, True, True]
    assert torch.equal(rng, torch.random.get_rng_state())


class _ForwardForwardLayer(nn.Linear):
    """pytorch/examples' mnist_forward_forward: a layer whose ``train`` trains it (an override of Module.train)."""

    def train(self, x_pos, x_neg):  # noqa: D102 - the example's own meaning
        raise AssertionError("the probe called the model's own train()")


def test_shape_flow_sets_eval_mode_without_calling_the_model_s_train():
    model = nn.Sequential(_ForwardForwardLayer(8, 4), nn.Dropout(0.5))
    flow = shape_flow(model, *call_args(torch.randn(2, 8)))
    assert flow.error is None and [r.output for r in flow.rows][-1] == "[2, 4]"
    assert all(m.training for m in model.modules())  # put back as it was


class _Blocks(nn.Module):
    """minGPT's layout: a ModuleDict and a ModuleList that are never called, only reached through."""

    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict({"h": nn.ModuleList([nn.ModuleDict({"fc": nn.Linear(4, 4)})] * 1),
                                          "ln": nn.LayerNorm(4)})
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        for block in self.transformer["h"]:
            x = block["fc"](x)
        return self.head(self.transformer["ln"](x))


def test_shape_flow_shows_the_containers_a_called_layer_sits_in():
    flow = shape_flow(_Blocks(), (torch.randn(3, 4),))
    assert [r.name for r in flow.rows] == ["", "transformer.h.0.fc", "transformer.ln", "head"]  # only what ran
    assert flow.containers == {"transformer": "ModuleDict", "transformer.h": "ModuleList",
                               "transformer.h.0": "ModuleDict"}
    console = make_console(file=io.StringIO())
    console.print(render_shape_flow(flow))
    lines = [line.rstrip() for line in console.file.getvalue().splitlines()[1:-1]]
    tree = [(len(line) - len(line.lstrip()), line.split()[0], line.split()[1]) for line in lines]
    assert tree == [(0, "(model)", "_Blocks"), (2, "transformer", "ModuleDict"), (4, "h", "ModuleList"),
                    (6, "0", "ModuleDict"), (8, "fc", "Linear"), (4, "ln", "LayerNorm"), (2, "head", "Linear")]
    assert all("not called" in line for line in lines[1:4]) and "not called" not in lines[4]


def test_shape_flow_failure_names_the_failing_layer():
    model = _bn_model()
    flow = shape_flow(model, (torch.randn(2, 3, 9, 9),))
    assert flow.error and "mat1 and mat2" in flow.error
    failing = [r for r in flow.rows if r.error]
    assert [r.name for r in failing] == ["4"]
    assert model.training and int(model[1].num_batches_tracked) == 0


def test_split_args_and_call_args():
    assert split_args("model x") == ("model", "x")
    assert split_args("model, x") == ("model", "x")
    assert split_args("self.net torch.randn(2, 3)") == ("self.net", "torch.randn(2, 3)")
    assert split_args("model (x, mask)") == ("model", "(x, mask)")
    assert split_args("m, a, b") == ("m", "(a, b)")
    assert split_args("model.transformer.h.0 x") == ("model.transformer.h.0", "x")  # a path as reports print it
    assert split_args("model.h.0.attn (x, mask)") == ("model.h.0.attn", "(x, mask)")
    with pytest.raises(ShapesUsageError):
        split_args("model")
    x = torch.zeros(1)
    assert call_args(x) == ((x,), {})
    assert call_args((x, 1)) == ((x, 1), {})
    assert call_args({"input_ids": x}) == ((), {"input_ids": x})


def test_histogram_counts():
    h = histogram(torch.tensor([0, 0, 1, 2, 2, 2]))
    assert h.integer and h.counts == (2, 1, 3) and h.total == 6
    values = torch.tensor([0.0, 0.1, 0.9, 1.0, float("nan"), float("inf")])
    h = histogram(values, bins=2)
    assert h.counts == (2, 2) and h.nonfinite == 2 and h.edges[0] == 0.0 and h.edges[-1] == 1.0
    big = histogram(torch.randn(10_000), sample=1000)
    assert big.sampled and 900 <= big.total <= 1000
    assert histogram(torch.zeros(3, device="meta")) is None
    assert histogram(torch.tensor([float("nan")])) is None


def test_memory_report_lists_largest_tensors_without_touching_cuda():
    report = memory_report([("small", torch.zeros(2)), ("big", torch.zeros(1000)), ("mid", torch.zeros(10))])
    assert [name for name, *_ in report.largest] == ["big", "mid", "small"]
    assert report.largest[0][1] == 4000
    assert report.rss is None or report.rss > 0
    if not torch.cuda.is_available():
        assert report.devices == () and report.cuda_note


def test_other_device_follows_the_model_and_spares_cpu_scalars():
    # meta stands in for a GPU: the model lives there, the batch was left on the CPU
    model = nn.Linear(3, 2, device="meta")
    found, _ = reachable_tensors({
        "model": model, "x": torch.zeros(4, 3), "y": torch.zeros(4), "mask": torch.ones(4),
        "step": torch.tensor(3), "h": torch.zeros(4, 2, device="meta")})
    rows = {r.name: r.flags for r in tensor_rows(found)}
    # CPU tensors outnumber the model's, but the model's device is where the work happens
    assert "other device" in rows["x"] and "other device" in rows["y"] and "other device" in rows["mask"]
    assert "other device" not in rows["model.weight"] and "other device" not in rows["h"]
    assert "other device" not in rows["step"]  # a 0-dim CPU tensor mixes with any device
    # no model: the device most tensors use; a tie names no single culprit, so both are flagged
    rows = {r.name: r.flags for r in tensor_rows([("a", torch.zeros(2)), ("b", torch.zeros(2, device="meta"))])}
    assert rows == {"a": ("mixed devices",), "b": ("mixed devices",)}


def test_nonfinite_rows_rank_parameters_gradients_and_sampled_tensors(monkeypatch):
    from tensor_dap.summary import Budget

    summary = sys.modules["tensor_dap.summary.tensor"]

    model = nn.Linear(4, 4)
    model(torch.randn(2, 4)).sum().backward()
    model.weight.grad[0, 0] = float("inf")  # 1 of 16
    model.bias.data[:] = float("nan")  # 4 of 4
    loss = torch.tensor(float("nan"))
    big = torch.zeros(1000)
    big[:900] = float("nan")  # 90%, but only a sample is counted
    monkeypatch.setattr(summary, "DEFAULT_BUDGET", Budget(exact_elements=100, scan_elements=100, max_ms=None))
    found, _ = reachable_tensors({"model": model, "loss": loss, "big": big}, grads=True)
    rows = nonfinite_rows(found)
    names = [r.name for r in rows]
    assert names[-1] == "model.weight.grad" and set(names[:3]) == {"loss", "model.bias", "big"}
    by_name = {r.name: r for r in rows}
    assert by_name["big"].estimated and 0.8 < by_name["big"].fraction <= 1.0
    assert by_name["model.weight.grad"].fraction == pytest.approx(1 / 16) and not by_name["model.weight.grad"].estimated
    out = io.StringIO()
    make_console(file=out).print(render_nonfinite(rows, len(found)))
    lines = out.getvalue().splitlines()
    # exact rows show counts; the sampled one shows its estimates, marked as such
    assert re.match(r"model\.bias\s+4\s+0\s+0\s+100%", next(t for t in lines if t.startswith("model.bias")))
    assert re.match(r"big\s+≈\d+\s+≈0\s+≈0\s+~", next(t for t in lines if t.startswith("big")))


def test_memory_report_cuda_branch_reads_each_device(monkeypatch):
    # No GPU on this machine: torch.cuda's counters are stubbed (the CUDA path itself runs on a GPU box)
    counters = {0: (3 << 30, 4 << 30, 5 << 30), 1: (0, 0, 0), 2: (1 << 20, 2 << 20, 1 << 20)}
    cuda = torch.cuda
    monkeypatch.setattr(cuda, "is_available", lambda: True)
    monkeypatch.setattr(cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(cuda, "device_count", lambda: 3)
    monkeypatch.setattr(cuda, "current_device", lambda: 0)
    monkeypatch.setattr(cuda, "memory_allocated", lambda i: counters[i][0])
    monkeypatch.setattr(cuda, "memory_reserved", lambda i: counters[i][1])
    monkeypatch.setattr(cuda, "max_memory_allocated", lambda i: counters[i][2])

    class Props:
        total_memory = 80 << 30

    monkeypatch.setattr(cuda, "get_device_properties", lambda i: Props())
    report = memory_report([])
    assert [(d.device, d.allocated, d.reserved, d.peak_allocated, d.total) for d in report.devices] == [
        ("cuda:0", 3 << 30, 4 << 30, 5 << 30, 80 << 30), ("cuda:2", 1 << 20, 2 << 20, 1 << 20, 80 << 30)]
    assert report.cuda_note == "1 other CUDA device unused by this process"


def test_shape_flow_keyword_inputs_and_lazy_modules():
    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(10, 6)
            self.proj = nn.Linear(6, 2)

        def forward(self, input_ids, mask=None):
            return self.proj(self.embed(input_ids) * mask[..., None])

    ids = torch.randint(0, 10, (2, 5))
    flow = shape_flow(Encoder(), *call_args({"input_ids": ids, "mask": torch.ones(2, 5)}))
    assert flow.error is None
    assert flow.rows[0].inputs == "input_ids=[2, 5], mask=[2, 5]" and flow.rows[0].output == "[2, 5, 2]"
    lazy = nn.Sequential(nn.LazyLinear(3))
    with pytest.raises(ShapesUsageError, match="uninitialized lazy parameters"):
        shape_flow(lazy, (torch.zeros(2, 4),))
    assert lazy[0].has_uninitialized_params()  # untouched


def test_mem_counts_what_a_broadcast_view_holds():
    from tensor_dap.probe.memory import memory_report

    mask = torch.ones(32, 1, 1, 2048).expand(32, 16, 2048, 2048)
    largest = dict((name, size) for name, size, _, _ in memory_report([("mask", mask), ("x", torch.randn(100_000))])
                   .largest)
    assert largest == {"x": 400_000, "mask": 262_144}  # its 256 KiB of storage, not 8 GiB


def test_mem_counts_what_a_sparse_or_nested_tensor_holds():
    """A GCN's adjacency matrix (pytorch/examples' gcn): ``mem`` ranked a 2708² sparse matrix of 8,136 entries as
    28 MiB, its dense size; it holds its values and indices."""
    adj = (torch.eye(2708) + torch.diag(torch.ones(2707), 1)).to_sparse()
    csr = torch.eye(300).to_sparse_csr()
    jagged = torch.nested.nested_tensor([torch.ones(3), torch.ones(500)], layout=torch.jagged)
    found = [("adj", adj), ("csr", csr), ("jagged", jagged), ("x", torch.randn(10_000)),
             ("meta", torch.empty(10**9, device="meta"))]
    largest = {name: size for name, size, _, _ in memory_report(found).largest}
    assert largest == {"adj": 5415 * (4 + 2 * 8), "csr": 300 * (4 + 8) + 301 * 8, "jagged": 503 * 4, "x": 40_000,
                       "meta": 0}
    assert tensor_dap.describe(adj).nbytes == largest["adj"]


def test_nan_command_reads_past_the_time_cap_of_a_summary(monkeypatch):
    """The summary line may stop at its time cap; `nan`, which the user asked for, reads every element's range."""
    from tensor_dap.summary import Budget

    summary = sys.modules["tensor_dap.summary.tensor"]
    cut_short = Budget(exact_elements=2**16, scan_elements=2**24, chunk_elements=2**14, max_ms=0.001)
    monkeypatch.setattr(summary, "DEFAULT_BUDGET", cut_short)
    x = torch.randn(2**22)
    x[3 * 2**20 + 5] = float("nan")
    from tensor_dap import describe

    assert not describe(x).has_nan  # the default budget stops long before it
    rows = nonfinite_rows([("x", x)])
    assert [r.name for r in rows] == ["x"] and rows[0].summary.range_exact and rows[0].bad == 1
