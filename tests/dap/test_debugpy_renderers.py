"""The debugpy plugin as a VS Code user meets it: the real debugpy adapter, real DAP over a socket.

Each debug session launches a debuggee with this venv's Python, so pydevd finds
pydevd_plugins/extensions/pydevd_plugin_tensor_dap.py exactly as it would after `pip install`.
The pure parts (preview bounds, pacing, module/optimizer summaries) are tested directly below.
"""

from __future__ import annotations

import ast
import math
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import dapclient
import pytest
import torch
from dapclient import DapClient, DapError
from markers import file_marker_line
from zoo import ZOO

from tensor_dap.dap import expand as dap_children
from tensor_dap.dap import nodes, pacing, values
from tensor_dap.summary import Budget
from tensor_dap.summary import modules as module_summary
from tensor_dap.summary import objects as objects_summary

pytest.importorskip("debugpy")

REPO = Path(__file__).resolve().parents[2]
DEBUGGEES = REPO / "tests" / "debuggees"
ZOO_SCRIPT = DEBUGGEES / "debuggee_renderers_zoo.py"
FAIL_SCRIPT = DEBUGGEES / "debuggee_renderers_fail.py"
FALLBACK = "tensor_dap could not render"

TENSOR_CHILDREN = ["shape", "dtype", "device", "stats", "grad", "requires_grad", "is_leaf", "grad_fn", "layout",
                   "stride", "is_contiguous", "numel", "nbytes", "storage", "values"]


class Session:
    """One stopped debug session: the frame, its locals, and helpers that read like the UI."""

    def __init__(self, dap: DapClient) -> None:
        self.dap = dap
        self.frame_id = dap.stack_trace(dap.stopped_thread, levels=1)[0]["id"]
        self.locals = dap.frame_locals()

    def children(self, var: dict) -> dict:
        assert var["variablesReference"] > 0, f"{var['name']} is not expandable: {var['value']}"
        return {c["name"]: c for c in self.dap.variables(var["variablesReference"])}

    def watch(self, expression: str, context: str = "watch") -> str:
        return self.dap.evaluate(expression, self.frame_id, context=context)["result"]


def _launch(script: Path, line_marker: str, condition: str | None = None, env: dict | None = None):
    dap = DapClient.launch(str(script), env=env, timeout=60)
    try:
        line = file_marker_line(script, line_marker)
        bps = dap.set_breakpoints(str(script), [line], conditions={line: condition} if condition else None)
        assert bps[0]["verified"]
        dap.configuration_done()
        assert dap.wait_for_event("stopped", timeout=60)["reason"] == "breakpoint"
        return dap, Session(dap)
    except BaseException:
        dap.close()
        raise


@pytest.fixture(scope="module")
def zoo():
    """Stopped in the training loop of debuggee_renderers_zoo.py at step 2 (a conditional breakpoint)."""
    dap, session = _launch(ZOO_SCRIPT, "BP-loop", condition="step == 2")
    yield session
    dap.close()


def assert_rendered(var: dict) -> None:
    """No pydevd error child, no fallback, no plain tensor repr."""
    assert var["name"] != "<error>", var["value"]
    assert FALLBACK not in var["value"], var
    assert "tensor([" not in var["value"] and "Parameter containing" not in var["value"], var


# ---------------------------------------------------------------------------- values in the panel


@pytest.mark.timeout(120)
def test_conditional_breakpoint_frame_shows_one_line_values(zoo):
    v = {name: var["value"] for name, var in zoo.locals.items()}
    assert v["step"] == "2"
    assert v["inputs"].startswith("tensor[32, 784] n=25088 (98 KiB) x∈[")
    assert v["labels"].startswith("tensor[32] i64 n=32 (256 B) x∈[")
    assert v["loss"].startswith("tensor[] ") and v["loss"].endswith(" grad NllLossBackward0")
    assert v["weight"].startswith("Parameter[256, 784] n=200704 (784 KiB) x∈[") and v["weight"].endswith(
        "grad has .grad")
    assert v["model"] == "Sequential(4) 203,530 params f32 cpu train 1 hook"
    assert v["encoder"] == "ModuleDict(4) 85,568 params (64,000 frozen) f32+i64 cpu eval"
    lr = 1e-3 * (1 + math.cos(math.pi * 3 / 10)) / 2  # CosineAnnealingLR(T_max=10) after 3 steps
    assert re.fullmatch(r"AdamW lr=(\S+) 1 group 203,530 params state 1\.6 MiB step=3", v["opt"])
    assert float(v["opt"].split()[1][3:]) == pytest.approx(lr, rel=1e-3)
    assert re.fullmatch(r"CosineAnnealingLR lr=\S+ step=3", v["sched"])
    assert v["sgd"] == "SGD lr=0.1,0.01 2 groups 21,440 params no state"
    assert v["plateau"].startswith("ReduceLROnPlateau lr=0.1,0.01 step=0 best=inf num_bad_epochs=0")
    assert v["loader"] == ("DataLoader batch_size=32 num_workers=0 pin_memory=False "
                           "dataset=TensorDataset(1,000) 32 batches shuffle")
    assert v["data"] == "TensorDataset(1,000) tensor[1000, 784], tensor[1000] i64"
    assert v["batch"] == "{'input': tensor[32, 784], 'label': tensor[32] i64}"
    assert v["lazy"] == "Sequential(2) params uninitialized (lazy) f32 cpu train 2 hooks"
    assert v["pair"] == "[tensor[2, 784], tensor[2] i64]"
    assert v["top"] == "torch.return_types.max(values=tensor[32], indices=tensor[32] i64)"
    for var in zoo.locals.values():
        assert_rendered(var)


@pytest.mark.timeout(120)
def test_hover_watch_repl_and_clipboard(zoo):
    line = zoo.locals["inputs"]["value"]
    assert zoo.watch("inputs", "hover") == line
    assert zoo.watch("inputs", "watch") == line
    repl = zoo.watch("inputs", "repl")
    assert repl.startswith(line + "\n") and "tensor([[" in repl
    clip = zoo.watch("inputs", "clipboard")
    assert clip.startswith("tensor([[") and "..." in clip  # torch's own repr, as "Copy Value" promises
    assert zoo.watch("model", "clipboard").startswith("Sequential(\n  (0): Linear(in_features=784")
    assert zoo.watch("model", "hover") == zoo.locals["model"]["value"]


# ---------------------------------------------------------------------------- children and Add to Watch


@pytest.mark.timeout(120)
def test_tensor_children_are_ordered_and_watchable(zoo):
    kids = zoo.children(zoo.locals["weight"])
    assert list(kids) == TENSOR_CHILDREN
    assert kids["shape"]["value"] == "[256, 784]"
    assert zoo.watch(kids["shape"]["evaluateName"]) == "torch.Size([256, 784])"
    assert zoo.watch(kids["dtype"]["evaluateName"]) == kids["dtype"]["value"] == "torch.float32"
    assert kids["requires_grad"]["value"] == "True" and kids["is_leaf"]["value"] == "True"
    assert zoo.watch(kids["stride"]["evaluateName"]) == kids["stride"]["value"] == "(784, 1)"
    assert zoo.watch(kids["numel"]["evaluateName"]) == kids["numel"]["value"] == "200704"
    assert zoo.watch(kids["storage"]["evaluateName"]) == "802816"

    # stats: the summary's numbers, each one watchable
    stats = kids["stats"]
    assert re.match(r"x∈\[\S+, \S+\] μ=\S+ σ=\S+ NaN=0 \+Inf=0 -Inf=0 exact$", stats["value"])
    assert zoo.watch(stats["evaluateName"]).split()[0] == stats["value"].split()[0]  # the exact range
    numbers = zoo.children(stats)
    assert list(numbers)[:4] == ["min", "max", "mean", "std"]
    for name in ("min", "max", "NaN count", "sampled"):
        assert zoo.watch(numbers[name]["evaluateName"]) == numbers[name]["value"], name
    for name in ("mean", "std"):  # recomputed by Watch with torch's threads: the last bits may differ
        assert float(zoo.watch(numbers[name]["evaluateName"])) == pytest.approx(float(numbers[name]["value"]),
                                                                               rel=1e-5), name
    assert float(numbers["min"]["value"]) < float(numbers["mean"]["value"]) < float(numbers["max"]["value"])

    # grad: its own summary, expandable, watchable
    grad = kids["grad"]
    assert grad["value"].startswith("tensor[256, 784] n=200704")
    assert zoo.watch(grad["evaluateName"]) == grad["value"]
    assert list(zoo.children(grad))[:4] == ["shape", "dtype", "device", "stats"]

    # values: a bounded block, never the whole tensor
    values = kids["values"]
    assert values["evaluateName"] == "weight[:16, :16]"
    assert values["value"].startswith("first 16×16 of 256×784: [[")
    assert zoo.watch(values["evaluateName"]).startswith("tensor[16, 16] n=256")
    rows = zoo.children(values)
    assert list(rows) == [str(i) for i in range(16)]
    row0 = zoo.children(rows["0"])
    assert len(row0) == 16
    first = float(row0["0"]["value"])
    assert float(zoo.watch(row0["0"]["evaluateName"]).split()[1]) == pytest.approx(first, rel=1e-3)


@pytest.mark.timeout(120)
def test_add_to_watch_from_a_watch_expression_child(zoo):
    """Children of a Watch expression like `weight - weight.grad`: their Watch expression is the child's."""
    for expression in ("weight - weight.grad", "logits * 2", "model if step else None"):
        result = zoo.dap.evaluate(expression, zoo.frame_id, context="watch")
        kids = {c["name"]: c for c in zoo.dap.variables(result["variablesReference"])}
        same = ("dtype", "requires_grad", "is_leaf", "stride", "is_contiguous", "numel", "0")
        for name, kid in kids.items():
            if kid.get("evaluateName"):
                watched = zoo.watch(kid["evaluateName"])  # evaluates (a DapError fails the test)
                if name in same:
                    assert watched == kid["value"], (expression, name, kid["evaluateName"])
    kids = {c["name"]: c for c in zoo.dap.variables(
        zoo.dap.evaluate("weight - weight.grad", zoo.frame_id, context="watch")["variablesReference"])}
    assert kids["shape"]["evaluateName"] == "(weight - weight.grad).shape"
    assert kids["values"]["evaluateName"] == "(weight - weight.grad)[:16, :16]"
    assert zoo.watch(kids["values"]["evaluateName"]).startswith("tensor[16, 16] n=256")


@pytest.mark.timeout(120)
def test_non_leaf_children_read_no_grad(zoo):
    kids = zoo.children(zoo.locals["logits"])
    assert kids["grad"]["value"].startswith("None (non-leaf")
    assert "evaluateName" not in kids["grad"]  # watching it would warn
    assert kids["grad_fn"]["value"] == "AddmmBackward0"
    assert kids["is_leaf"]["value"] == "False"
    assert "AddmmBackward0" in zoo.watch(kids["grad_fn"]["evaluateName"])
    assert "non-leaf Tensor is being accessed" not in zoo.dap.output_text()


@pytest.mark.timeout(180)
def test_zoo_every_tensor_kind_renders(zoo):
    items = zoo.children(zoo.locals["zoo"])
    unwatchable = []
    for name, _factory, expected_head, _tokens in ZOO:
        var = items[repr(name)]
        assert_rendered(var)
        assert var["value"].startswith(expected_head), (name, var["value"])
        kids = zoo.children(var)
        assert list(kids)[:4] == ["shape", "dtype", "device", "stats"], name
        if name.startswith("sparse"):  # what it stores, each a tensor to open (eye(6): six ones)
            members = {"sparse coo": ["values", "indices"], "sparse csr": ["values", "crow_indices", "col_indices"],
                       "sparse csc": ["values", "ccol_indices", "row_indices"]}[name]
            assert list(kids)[-len(members):] == members, (name, list(kids))
            assert kids["values"]["value"].startswith("tensor[6] ") and kids["values"]["variablesReference"]
            assert zoo.watch(kids["values"]["evaluateName"]) == kids["values"]["value"]
            assert kids[members[1]]["value"].startswith("tensor[2, 6] i64" if name == "sparse coo" else "tensor[7] i64")
        for kid in kids.values():
            assert_rendered(kid)
            if kid["name"] in ("stats", "values") and kid["variablesReference"]:
                for grandchild in zoo.dap.variables(kid["variablesReference"]):
                    assert_rendered(grandchild)
        # "Add to Watch" on any child evaluates (one request for all of them; one by one to report a failure)
        names = [kid["evaluateName"] for kid in kids.values() if kid.get("evaluateName")]
        assert len(names) >= 8, (name, list(kids))
        try:
            zoo.watch("(" + ", ".join(names) + ",)")
        except DapError:
            for expression in names:
                try:
                    zoo.watch(expression)
                except DapError as exc:
                    unwatchable.append((name, expression, str(exc)[:120]))
            assert unwatchable, name
    assert not unwatchable


@pytest.mark.timeout(120)
def test_module_children(zoo):
    kids = zoo.children(zoo.locals["model"])
    assert list(kids) == ["0", "1", "2", "3", "params", "dtypes", "devices", "mode", "hooks"]
    assert kids["0"]["value"] == "Linear(784→256) 200,960 params f32 cpu train 1 hook"
    assert kids["0"]["evaluateName"] == "model[0]"
    assert zoo.watch("model[0]") == kids["0"]["value"]
    assert kids["params"]["value"] == "203,530 in 4 tensors (795 KiB): 203,530 trainable, 0 frozen"
    assert zoo.watch(kids["params"]["evaluateName"]) == "203530"
    assert kids["mode"]["value"] == "train" and zoo.watch(kids["mode"]["evaluateName"]) == "True"
    assert kids["hooks"]["value"] == "none (1 in the whole subtree)"

    linear = zoo.children(kids["0"])
    assert list(linear)[:2] == ["weight", "bias"]
    assert linear["weight"]["value"] == zoo.locals["weight"]["value"]
    assert linear["hooks"]["value"] == "1 forward"

    enc = zoo.children(zoo.locals["encoder"])
    assert enc["embed"]["value"] == "Embedding(1000×64) 64,000 params (all frozen) f32 cpu eval"
    assert enc["conv"]["value"] == "Conv2d(3→16, k=3, s=2) 448 params f32 cpu eval"
    assert enc["norm"]["value"] == "BatchNorm1d(64) 128 params f32+i64 cpu eval"
    assert enc["rnn"]["value"] == "LSTM(64→32 ×2) 20,992 params f32 cpu eval"
    assert enc["params"]["value"] == "85,568 in 13 tensors (334 KiB): 21,568 trainable, 64,000 frozen"
    assert enc["dtypes"]["value"] == "f32, i64" and enc["mode"]["value"] == "eval"
    assert zoo.watch(enc["embed"]["evaluateName"]) == enc["embed"]["value"]
    lazy = zoo.children(zoo.children(zoo.locals["lazy"])["0"])
    assert zoo.children(zoo.locals["lazy"])["0"]["value"] == (
        "LazyLinear(?→8) params uninitialized (lazy) f32 cpu train 2 hooks")
    assert lazy["params"]["value"] == "2 tensors uninitialized (materialized by the first forward)"
    assert lazy["weight"]["value"] == "UninitializedParameter (lazy: materialized by the first forward)"
    assert list(zoo.children(lazy["weight"])) == ["dtype", "device", "requires_grad", "notes"]
    norm = zoo.children(enc["norm"])
    assert list(norm)[:5] == ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"]


@pytest.mark.timeout(120)
def test_optimizer_scheduler_and_loader_children(zoo):
    opt = zoo.children(zoo.locals["opt"])
    assert opt["class"]["value"] == "AdamW"
    assert zoo.watch(opt["lr"]["evaluateName"]) == opt["lr"]["value"]
    assert opt["state"]["value"] == "4 params with state, 12 tensors (1.6 MiB)"
    assert opt["step"]["value"] == "3" and zoo.watch(opt["step"]["evaluateName"]) == "3"
    group = zoo.children(zoo.children(opt["param_groups"])["0"])
    assert group["weight_decay"]["value"] == "0.01"
    assert zoo.watch(group["weight_decay"]["evaluateName"]) == "0.01"
    assert group["params"]["evaluateName"] == "opt.param_groups[0]['params']"

    sgd_groups = zoo.children(zoo.children(zoo.locals["sgd"])["param_groups"])
    assert [g["value"].split()[0] for g in sgd_groups.values()] == ["lr=0.1", "lr=0.01"]

    sched = zoo.children(zoo.locals["sched"])
    assert sched["lr"]["value"] == opt["lr"]["value"]
    assert zoo.watch(sched["lr"]["evaluateName"]) == sched["lr"]["value"]
    assert sched["step"]["value"] == "3" and sched["base_lrs"]["value"] == "0.001"
    assert sched["optimizer"]["value"] == zoo.locals["opt"]["value"]
    plateau = zoo.children(zoo.locals["plateau"])
    assert plateau["lr"]["value"] == "[0.1, 0.01]" and plateau["patience"]["value"] == "2"

    loader = zoo.children(zoo.locals["loader"])
    for name, expected in [("batch_size", "32"), ("num_workers", "0"), ("pin_memory", "False"),
                           ("dataset_len", "1000"), ("batches", "32")]:
        assert loader[name]["value"] == expected, name
        assert zoo.watch(loader[name]["evaluateName"]) == expected, name
    assert loader["sampler"]["value"] == "RandomSampler (shuffle)"


@pytest.mark.timeout(120)
def test_batches_keep_pydevd_children_with_tensor_values(zoo):
    batch = zoo.children(zoo.locals["batch"])
    assert batch["'input'"]["value"] == zoo.locals["inputs"]["value"]
    assert batch["'input'"]["evaluateName"] == "batch['input']"
    assert list(zoo.children(batch["'label'"]))[:3] == ["shape", "dtype", "device"]
    top = zoo.children(zoo.locals["top"])
    assert top["1"]["value"].startswith("tensor[32] i64 n=32") and top["1"]["evaluateName"] == "top[1]"
    assert zoo.watch("top", "clipboard").startswith("torch.return_types.max(\nvalues=tensor([")
    pair = zoo.children(zoo.locals["pair"])
    assert pair["0"]["value"].startswith("tensor[2, 784] n=1568")
    assert zoo.children(pair["0"])["values"]["evaluateName"] == "pair[0][:, :128]"


# ---------------------------------------------------------------------------- failures and opting out


@pytest.mark.timeout(120)
def test_injected_failure_degrades_for_that_value_only():
    dap, s = _launch(FAIL_SCRIPT, "BP-here")
    with dap:
        v = {name: var["value"] for name, var in s.locals.items()}
        # the first tensor pydevd renders fails; it still names itself and says why
        assert v["a_poisoned"] == ("tensor[3, 4] (tensor_dap could not render this value: "
                                   "RuntimeError: injected failure)")
        assert v["b_good"] == "tensor[5] x∈[0, 4] μ=2 σ=1.581 [0, 1, 2, 3, 4]"
        assert v["c_poisoned"].startswith("tensor[2, 2] f64 (tensor_dap could not render")
        assert v["d_good"] == "tensor[7] i32 x∈[1, 1] μ=1 σ=0 [1, 1, 1, 1, 1, 1, 1]"
        assert v["a_model_poisoned"] == ("Linear (tensor_dap could not render this value: "
                                         "RuntimeError: injected module failure)")
        assert v["b_model_good"] == "Linear(4→5) 25 params f32 cpu train"

        bad = s.children(s.locals["a_poisoned"])
        assert bad["error"]["value"] == "RuntimeError: injected failure"
        assert bad["shape"]["value"] == "torch.Size([3, 4])"
        assert list(s.children(s.locals["b_good"]))[:4] == ["shape", "dtype", "device", "stats"]
        assert "error" in s.children(s.locals["a_model_poisoned"])
        assert list(s.children(s.locals["b_model_good"]))[:2] == ["weight", "bias"]
        # hover after the failures: same fallback, and the type is still rendered by the plugin
        assert s.watch("a_poisoned", "hover") == v["a_poisoned"]
        assert s.watch("b_good * 2", "hover").startswith("tensor[5] x∈[0, 8]")


@pytest.mark.timeout(120)
def test_disable_env_var_gives_pydevd_plain_rendering():
    dap, s = _launch(FAIL_SCRIPT, "BP-here", env={"TENSOR_DAP_DISABLE_PLUGIN": "1"})
    with dap:
        assert s.locals["b_good"]["value"] == "tensor([0., 1., 2., 3., 4.])"
        assert s.locals["b_model_good"]["value"].startswith("Linear(in_features=4, out_features=5")


NO_TORCH = textwrap.dedent(
    """\
    import sys
    config = {"lr": 0.1, "layers": [1, 2]}
    print(sorted(config))  # BP-here
    """
)


@pytest.mark.timeout(60)
def test_plugin_loads_in_a_program_without_torch(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text(NO_TORCH)
    dap, s = _launch(script, "BP-here")
    with dap:
        assert s.locals["config"]["value"] == "{'lr': 0.1, 'layers': [1, 2]}"  # pydevd's own repr
        assert s.watch("'pydevd_plugins.extensions.pydevd_plugin_tensor_dap' in sys.modules") == "True"
        assert s.watch("'torch' in sys.modules") == "False"


# ---------------------------------------------------------------------------- pure parts


@pytest.mark.parametrize("shape", [(10**8,), (32, 784), (2, 1000), (1000, 2), (3, 5, 7, 9), (1, 1, 300), (7,), ()])
def test_preview_is_bounded_and_balanced(shape):
    index = dap_children.preview_index(shape)
    assert len(index) == len(shape)
    assert math.prod(index) <= dap_children.PREVIEW_ELEMENTS
    assert all(1 <= n <= d for n, d in zip(index, shape))
    if math.prod(shape) <= dap_children.PREVIEW_ELEMENTS:
        assert index == shape  # a small tensor is shown whole
    else:  # and a big one fills at least a quarter of the preview
        assert math.prod(index) >= dap_children.PREVIEW_ELEMENTS // 4


def test_preview_reads_only_the_block():
    x = torch.arange(10**6, dtype=torch.float32).view(1000, 1000).t()
    node = dap_children.preview(x, dap_children.preview_index(tuple(x.shape)))
    assert node.text.startswith("first 16×16 of 1000×1000: [[0, 1000, 2000")
    assert len(node.children) == 16 and len(node.children[0][1].children) == 16


def test_pacer_switches_to_thrifty_budget_after_a_burst():
    now = [0.0]
    per_value, thrifty = Budget(max_ms=20), Budget(exact_elements=10, scan_elements=10, max_ms=1)
    pacer = pacing.Pacer(per_value, thrifty, burst_ms=100, window_s=1.0, clock=lambda: now[0])
    for _ in range(4):
        assert pacer.budget() is per_value
        pacer.spend(0.03)
    assert pacer.budget() is thrifty  # 120 ms spent within the window
    now[0] = 1.5
    assert pacer.budget() is per_value  # the burst is over


def test_describe_module_counts_shared_and_frozen_params_once():
    shared = torch.nn.Linear(4, 4)
    model = torch.nn.Sequential(shared, torch.nn.ReLU(), shared, torch.nn.Linear(4, 2).half())
    model[3].weight.requires_grad_(False)
    model[1].eval()
    model.register_forward_pre_hook(lambda m, a: None)
    ms = module_summary.describe_module(model)
    assert (ms.params, ms.trainable, ms.frozen, ms.param_tensors) == (20 + 10, 20 + 2, 8, 4)
    assert ms.dtypes == ("torch.float32", "torch.float16") and ms.devices == ("cpu",)
    assert ms.mode == "train (1 in eval)" and ms.hooks == (("forward_pre", 1),)
    assert str(ms) == "Sequential(4) 30 params (8 frozen) f32+f16 cpu train (1 in eval) 1 hook"


def test_describe_optimizer_state_matches_its_tensors():
    model = torch.nn.Linear(8, 3)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    assert str(objects_summary.describe_optimizer(opt)) == "Adam lr=0.01 1 group 27 params no state"
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
    s = objects_summary.describe_optimizer(opt)
    tensors = [v for st in opt.state.values() for v in st.values() if torch.is_tensor(v)]
    assert s.state_tensors == len(tensors) and s.state_bytes == sum(t.numel() * t.element_size() for t in tensors)
    assert s.step == 1 and s.lrs == (0.01,)


def test_describe_loader_without_len():
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(3))

    s = objects_summary.describe_loader(torch.utils.data.DataLoader(Stream(), batch_size=2))
    assert (s.dataset_len, s.batches, s.shuffle) == (None, None, None)
    assert str(s) == "DataLoader batch_size=2 num_workers=0 pin_memory=False dataset=Stream(len ?)"


def test_datasets_by_their_length_and_what_torch_s_own_hold():
    """torch's datasets are read from what they keep (no __len__ or __getitem__ runs); the program's own by their
    length; one with a repr of its own (its root, its split) is left to it."""
    from torch.utils.data import ConcatDataset, Dataset, Subset, TensorDataset

    calls = []

    class Mine(Dataset):
        def __len__(self):
            calls.append("len")
            return 7

        def __getitem__(self, i):
            calls.append("getitem")
            return i

    class Named(Mine):
        def __repr__(self):
            return "Named(root='/data', split='train')"

    data = TensorDataset(torch.randn(100, 8), torch.randint(0, 3, (100,)), torch.ones(100, 2, dtype=torch.bool),
                         torch.zeros(100), torch.zeros(100, 1))
    assert str(objects_summary.describe_object(data)) == ("TensorDataset(100) tensor[100, 8], tensor[100] i64, "
                                                          "tensor[100, 2] bool, tensor[100], … 1 more")
    assert str(objects_summary.describe_object(Subset(data, [1, 5, 9]))).startswith("Subset(3) of TensorDataset(100) ")
    assert str(objects_summary.describe_object(ConcatDataset([data, Mine()]))) == "ConcatDataset(107) of 2 datasets"
    calls.clear()
    assert str(objects_summary.describe_object(Mine())) == "Mine(7)" and calls == ["len"]
    assert nodes.kind_of(Named) is None and nodes.kind_of(Mine) == "dataset" and not nodes.expandable("dataset")

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(3))

    assert str(objects_summary.describe_object(Stream())) == "Stream(len ?)"


def test_batch_line_leaves_containers_without_tensors_to_pydevd():
    assert values.batch_line({"a": 1, "b": [2]}) is None
    assert values.batch_line([]) is None
    assert values.batch_line((torch.ones(2),)) == "(tensor[2],)"
    many = {str(i): torch.ones(1) for i in range(20)}
    assert values.batch_line(many).endswith("… 12 more}")
    batch = {"x": torch.ones(2)}
    assert values.value_text(batch, "batch", "hover") == "{'x': tensor[2]}"
    assert values.value_text(batch, "batch", "clipboard") is None  # Copy Value: pydevd's full repr


def test_batch_line_writes_its_plain_values_only_as_far_as_it_shows_them():
    line = values.batch_line({"ids": torch.ones(2), "text": ["a long document " * 50] * 100_000, "seed": 10 ** 5000,
                              "betas": (0.9, 0.99), "cfg": {"lr": 0.1}})
    assert line.startswith("{'ids': tensor[2], 'text': ['a long document a long document")
    assert "'seed': <int of about 5001 digits>" in line  # (its repr() would raise: past 4300 digits)
    assert "'betas': (0.9, 0.99)" in line and "'cfg': {'lr': 0.1}" in line
    keyed = values.batch_line({"k" * 10_000_000: torch.ones(1)})  # a key, too, only as far as the line shows it
    assert keyed.startswith("{'kkkk") and len(keyed) < 100


def test_launch_configs_point_at_files_that_exist():
    import json

    configs = json.loads((REPO / ".vscode" / "launch.json").read_text())["configurations"]
    assert configs and all(c["type"] == "debugpy" for c in configs)
    for c in (c for c in configs if c["request"] == "launch"):
        if "program" in c and "${file}" not in c["program"]:
            assert Path(c["program"].replace("${workspaceFolder}", str(REPO))).is_file(), c["name"]
        if c.get("module") == "tensor_dap":
            assert (REPO / c["module"] / "__main__.py").is_file(), c["name"]
    tour = next(c for c in configs if c.get("program", "").endswith(ZOO_SCRIPT.name) and "env" not in c)
    assert file_marker_line(ZOO_SCRIPT, "BP-loop")  # the line docs/vscode.md tells users to break on
    assert tour["python"].endswith(".venv/bin/python")


def test_meta_device_model_renders_without_reading_data():
    """The device path without a GPU: nothing here may touch tensor data (meta tensors have none)."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4, device="meta"), torch.nn.LayerNorm(4, device="meta"))
    assert values.value_text(model, "module") == "Sequential(2) 28 params f32 meta train"
    weight = {name: value for name, value, _ in dap_children.children(model[0], "module")}["weight"]
    kids = {name: value for name, value, _ in dap_children.children(weight, "tensor")}
    assert "values" not in kids and values.value_text(kids["stats"], "stats") == "no values (meta)"
    opt = torch.optim.Adam(model.parameters(), lr=0.1, capturable=True)
    opt.state[model[0].weight] = {"step": torch.zeros((), device="meta"), "exp_avg": torch.empty(4, 4, device="meta")}
    s = objects_summary.describe_optimizer(opt)
    assert s.step is None and s.state_tensors == 2  # a device-side step is not read back (no sync)


# ---------------------------------------------------------------------------- installed from the wheel

SITE = Path(torch.__file__).resolve().parents[1]  # this venv's site-packages
X_LINE = "tensor[3, 4] n=12 (48 B) x∈[0, 11] μ=5.5 σ=3.606"
INSTALLED = textwrap.dedent(
    """\
    import sys
    import numpy as np
    import torch
    from torch import nn


    class Token:
        pass


    token = Token()
    arr = np.arange(6.0)
    x = torch.arange(12.0).view(3, 4)
    model = nn.Linear(4, 2)
    batch = {"x": x}
    print("ready", flush=True)  # BP-here
    """
)
OTHER_PLUGIN = textwrap.dedent(
    """\
    from _pydevd_bundle.pydevd_extension_api import StrPresentationProvider


    class TokenStr(StrPresentationProvider):
        def can_provide(self, type_object, type_name):
            return type_name == "Token"

        def get_str(self, val):
            return "rendered by another plugin"
    """
)
# what `pip install tensor-dap` brings, minus the packages this test installs or places itself
_NOT_DEPS = ("debugpy", "tensor_dap", "__editable__", "_lovely_tensors_hook", "pydevd_plugins")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh venv where tensor_dap comes only from its built wheel (pip, non-editable), never /work/main.

    torch, rich etc. are this venv's, reached through a plain path line (a path line is not a site
    dir, so this venv's editable-install .pth never runs there); debugpy is "pip installed" by a
    link, and a separate copy plays the one bundled in VS Code's Python Debugger extension.
    """
    root = tmp_path_factory.mktemp("installed")
    src = root / "src"  # build from a copy: no build/ or egg-info written into the shared tree
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, src / name)
    for name in ("tensor_dap", "pydevd_plugins"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(root / "dist"), str(src)], check=True, capture_output=True, timeout=120)
    wheel = next((root / "dist").glob("tensor_dap-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "pydevd_plugins/extensions/pydevd_plugin_tensor_dap.py" in names
    assert not [n for n in names if n.startswith("pydevd_plugins/") and n.endswith("__init__.py")], names

    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    str(wheel)], check=True, capture_output=True, timeout=120)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True).stdout.strip())
    deps = root / "deps"
    deps.mkdir()
    for entry in SITE.iterdir():
        if not entry.name.startswith(_NOT_DEPS) and entry.suffix != ".pth":
            (deps / entry.name).symlink_to(entry)
    (site / "_deps.pth").write_text(f"{deps}\n")
    (site / "pydevd_plugins" / "extensions" / "pydevd_plugin_zz_other.py").write_text(OTHER_PLUGIN)  # a neighbour
    for entry in SITE.glob("debugpy*"):  # debugpy from PyPI, as `pip install debugpy` leaves it
        (site / entry.name).symlink_to(entry)
    bundled = root / "ext" / "bundled" / "libs" / "debugpy"  # VS Code's copy, run by path like the extension
    shutil.copytree(SITE / "debugpy", bundled, ignore=shutil.ignore_patterns("__pycache__"))
    script = root / "app" / "train.py"
    script.parent.mkdir()
    script.write_text(INSTALLED)
    return {"python": python, "site": site, "bundled": bundled, "script": script}


def _launch_via(adapter_cmd: list[str], script: Path, python: Path) -> DapClient:
    """DapClient.launch with a chosen adapter command (the extension runs its bundled adapter by path)."""
    return DapClient.launch(str(script), python=str(python), timeout=60, adapter_cmd=adapter_cmd)


def _assert_installed_session(dap: DapClient, script: Path, installed: dict, debugpy_dir: Path) -> None:
    line = file_marker_line(script, "BP-here")
    assert dap.set_breakpoints(str(script), [line])[0]["verified"]
    dap.configuration_done()
    assert dap.wait_for_event("stopped", timeout=60)["reason"] == "breakpoint"
    s = Session(dap)
    assert s.locals["x"]["value"] == X_LINE
    assert s.locals["model"]["value"] == "Linear(4→2) 10 params f32 cpu train"
    assert s.locals["batch"]["value"] == "{'x': tensor[3, 4]}"
    assert list(s.children(s.locals["x"]))[:4] == ["shape", "dtype", "device", "stats"]
    assert s.watch("x", "hover") == s.locals["x"]["value"]
    # neither another installed plugin nor debugpy's own (numpy) plugins are shadowed
    assert s.locals["token"]["value"] == "rendered by another plugin"
    arr = s.children(s.locals["arr"])
    # min and max are computed by debugpy's numpy plugin
    assert (arr["min"]["value"], arr["max"]["value"]) == ("np.float64(0.0)", "np.float64(5.0)")
    where = ("(__import__('tensor_dap').__file__, "
             "sys.modules['pydevd_plugins.extensions.pydevd_plugin_tensor_dap'].__file__, "
             f"__import__('debugpy').__file__, [p for p in sys.path if p.startswith({str(REPO)!r})])")
    tensor_dap_file, plugin_file, debugpy_file, repo_paths = ast.literal_eval(s.watch(where, "repl"))
    assert tensor_dap_file.startswith(str(installed["site"])), tensor_dap_file
    assert plugin_file.startswith(str(installed["site"])), plugin_file
    assert debugpy_file.startswith(str(debugpy_dir)), debugpy_file
    assert repo_paths == []


@pytest.mark.timeout(240)
def test_installed_wheel_with_debugpy_from_pypi(installed):
    """`pip install tensor-dap` into a fresh venv, F5 with the venv's own debugpy (launch)."""
    python = installed["python"]
    with _launch_via([str(python), "-m", "debugpy.adapter"], installed["script"], python) as dap:
        _assert_installed_session(dap, installed["script"], installed, installed["site"] / "debugpy")


@pytest.mark.timeout(240)
def test_installed_wheel_with_debugpy_bundled_in_vscode(installed):
    """The Python Debugger extension runs its own debugpy copy by path; the plugin still comes from the venv."""
    python, bundled = installed["python"], installed["bundled"]
    with _launch_via([str(python), str(bundled / "adapter")], installed["script"], python) as dap:
        _assert_installed_session(dap, installed["script"], installed, bundled)


@pytest.mark.timeout(240)
def test_installed_wheel_attach_to_debugpy_listen(installed):
    """`python -m debugpy --listen 127.0.0.1:PORT --wait-for-client train.py`, then VS Code attaches."""
    port = dapclient.free_port()
    proc, dap = dapclient.attach_to_listener(
        [str(installed["python"]), "-m", "debugpy", "--listen", f"127.0.0.1:{port}", "--wait-for-client",
         str(installed["script"])], port, timeout=60, cwd=str(installed["script"].parent),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        with dap:
            _assert_installed_session(dap, installed["script"], installed, installed["site"] / "debugpy")
    finally:
        dapclient._kill_group(proc.pid, leader=True)
        proc.wait(timeout=10)


def test_partly_lazy_module_counts_only_materialized_params():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LazyLinear(2), torch.nn.LazyBatchNorm1d())
    ms = module_summary.describe_module(model)
    assert (ms.params, ms.param_tensors, ms.uninitialized, ms.buffers) == (20, 2, 2 + 4, 1)
    assert str(ms) == "Sequential(3) 20 params (+6 uninitialized) f32+i64 cpu train 4 hooks"
    kids = {name: value for name, value, _ in dap_children.children(model, "module")}
    assert kids["params"] == "20 in 2 tensors (80 B): 20 trainable, 0 frozen; 6 tensors uninitialized"
    model(torch.randn(3, 4))  # the first forward materializes them
    assert module_summary.describe_module(model).uninitialized == 0


@pytest.mark.parametrize(("parent", "watched"), [
    ("x", "x.shape"), ("batch['input'][0]", "batch['input'][0].shape"), ("model.fc(x)", "model.fc(x).shape"),
    ("a - b", "(a - b).shape"), ("-x", "(-x).shape"), ("a, b", "(a, b).shape"), ("1", "(1).shape"),
    ("x if c else y", "(x if c else y).shape"), ("lambda: x", "(lambda: x).shape"),
])
def test_child_watch_expressions_bind_to_the_whole_parent(parent, watched):
    shape = next(ev for name, _, ev in dap_children.children(torch.ones(2), "tensor") if name == "shape")
    assert shape(parent) == watched


@pytest.mark.timeout(120)
def test_tensors_inside_vmap_and_grad_render_with_every_sample():
    """A breakpoint in a per-sample function under vmap(grad(...)): torch refuses to read a batched tensor's values,
    so the panel shows the values vmap holds, one row per sample, and no error child."""
    dap, session = _launch(DEBUGGEES / "debuggee_vmap.py", "BP-inside")
    try:
        x, y = session.locals["x"], session.locals["y"]
        assert x["value"] == "tensor[4] func.grad vmap ×3 x∈[0, 1.1] μ=0.55 σ=0.3606", x
        assert y["value"].startswith("tensor[4] func.grad vmap ×3 ") and "TanhBackward0" in y["value"]
        kids = session.children(x)
        assert "error" not in kids and kids["shape"]["value"] == "[4]" and kids["stride"]["value"] == "(1,)"
        assert kids["notes"]["value"] == "func.grad, vmap ×3" and "storage" not in kids  # (torch: it has none)
        values = kids["values"]
        assert values["value"].startswith("func.grad vmap ×3, every sample: [[0, 0.1, 0.2, 0.3], [0.4,")
        assert [r["value"] for r in dap.variables(values["variablesReference"])][2] == "[0.8, 0.9, 1, 1.1]"
        w = session.children(session.locals["w"])  # grad's wrapper alone: one sample, watchable as usual
        assert w["values"]["value"] == "[0, 1, 2, 3]" and w["values"]["evaluateName"] == "w"
        assert session.watch("x * 2").startswith("tensor[4] func.grad vmap ×3 x∈[0, 2.2]")
    finally:
        dap.close()


class _Scripted(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.bn = torch.nn.BatchNorm1d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.fc(x))


@pytest.mark.parametrize("compile_", ["script", "trace"])
def test_a_torchscript_module_is_summarized_as_the_users_class_with_its_parameters(compile_):
    """TorchScript keeps a module's parameters, submodules and attributes in C++ behind wrappers that are not dicts (a
    traced module wraps a scripted one): the Variables panel said ``Net(original_name=Net) no params``."""
    eager = _Scripted()
    model = torch.jit.script(eager) if compile_ == "script" else torch.jit.trace(eager, torch.randn(2, 4))
    model.bn.eval()
    eager.bn.eval()
    ms = module_summary.describe_module(model)
    assert str(ms) == str(module_summary.describe_module(eager)) == "_Scripted 21 params f32+i64 cpu train (1 in eval)"
    assert (ms.kind, ms.params, ms.buffers) == ("_Scripted", 12 + 3 + 6, 6 + 1)
    # a scripted Linear keeps in_features as an attribute of its C++ module; tracing keeps only tensors
    assert module_summary.signature(model.fc) == ("Linear(4→3)" if compile_ == "script" else "Linear")
    kids = {name: value for name, value, _ in dap_children.children(model, "module")}
    assert kids["params"] == {name: value for name, value, _ in dap_children.children(eager, "module")}["params"]
    assert kids["params"].startswith("21 in 4 tensors"), kids
