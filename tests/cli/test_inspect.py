"""``tensor-dap inspect`` on hostile and odd checkpoints: real files, real subprocesses, a real terminal."""

import os
import re
import subprocess
import sys
import time

import pytest
import torch

pytestmark = pytest.mark.timeout(240)


def inspect(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "tensor_dap", "inspect", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "NO_COLOR": "1"})


def test_keys_cannot_drive_the_terminal_or_rich_markup(tmp_path):
    keys = ["\x1b]0;pwned\x07title", "\x1b[2Jclear", "[bold red]markup[/]", "[/]close", "bidi\u202eevil", "a\nb"]
    path = tmp_path / "keys.pt"
    torch.save({k: torch.ones(2) for k in keys}, path)
    r = inspect(path)
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "\u202e" not in r.stdout and "\x07" not in r.stdout
    for shown in ("\\x1b]0;pwned\\x07title", "\\x1b[2Jclear", "[bold red]markup[/]", "[/]close", "bidi\\u202eevil",
                  "a\\nb"):
        assert shown in r.stdout, (shown, r.stdout)
    assert len(r.stdout.strip().splitlines()) == 1 + len(keys)  # one line per tensor, whatever the key


def test_self_referencing_list_is_listed_once(tmp_path):
    loop = [torch.zeros(3)]
    loop.append(loop)
    path = tmp_path / "loop.pt"
    torch.save({"loop": loop, "deep": [[[[torch.ones(1)]]]]}, path)
    r = inspect(path)
    assert r.returncode == 0, r.stderr
    assert "loop[0]  " in r.stdout and "deep[0][0][0][0]" in r.stdout and r.stdout.count("tensor[3]") == 1


def test_crafted_broadcast_tensors_list_fast(tmp_path):
    """A few bytes of storage standing for 2^62 elements: a bounded summary, not a hang."""
    path = tmp_path / "bomb.pt"
    torch.save({"bomb": torch.tensor(1.0).expand(2**31, 2**31),
                "mask": torch.ones(32, 1, 1, 2048).expand(32, 16, 2048, 2048),
                "patches": torch.randn(3, 64, 64).unfold(1, 8, 1).unfold(2, 8, 1)}, path)
    assert path.stat().st_size < 2_000_000
    start = time.perf_counter()
    r = inspect(path)
    assert r.returncode == 0, r.stderr
    assert time.perf_counter() - start < 60  # was: never returned
    assert re.search(r"^bomb +tensor\[2147483648, 2147483648\] expanded n=4611686018427387904", r.stdout, re.M)
    assert "x∈[1, 1] μ=1 σ=0" in r.stdout


def test_broken_files_are_one_line_exit_1(tmp_path):
    good = tmp_path / "good.pt"
    torch.save({"w": torch.ones(100)}, good)
    data = good.read_bytes()
    cases = {"truncated.pt": data[: len(data) // 2], "empty.pt": b"", "junk.pt": b"\x1b[2Jnot a checkpoint"}
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        r = inspect(tmp_path / name)
        assert r.returncode == 1, (name, r.returncode, r.stderr)
        assert r.stderr.startswith("tensor-dap: error: cannot load") and len(r.stderr.strip().splitlines()) == 1
        assert "Traceback" not in r.stderr and "\x1b" not in r.stderr
        if name in ("empty.pt", "junk.pt"):  # not a file torch.save wrote: said so, not "holds Python objects"
            assert "it is neither a zip archive (torch.save) nor a pickle" in r.stderr, r.stderr
    r = inspect(tmp_path)  # a directory: a usage mistake
    assert r.returncode == 2 and r.stderr.startswith("tensor-dap: error: no such file")


def test_progress_bar_on_a_terminal_when_it_takes_a_while(tmp_path):
    pexpect = pytest.importorskip("pexpect")
    path = tmp_path / "many.pt"
    torch.save({f"layer.{i}.w": torch.randn(8, 8) for i in range(20_000)}, path)
    child = pexpect.spawn(sys.executable, ["-m", "tensor_dap", "inspect", str(path)], encoding="utf-8", timeout=180,
                          dimensions=(40, 120))
    seen = child.expect(["loading the checkpoint", "summarizing", pexpect.EOF])
    child.expect(pexpect.EOF)
    child.close()
    assert seen in (0, 1) and child.exitstatus == 0
    assert "layer.19999.w" in child.before


def test_many_small_tensors_match_one_by_one():
    """describe_many (what inspect uses) gives the summaries describe gives, for every small kind."""
    from tensor_dap.summary import describe, describe_many

    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(17, generator=g) * 1e-30, torch.randn(5, 6, generator=g).t(), torch.tensor([1.0, float("nan")]),
          torch.tensor([float("inf"), -2.0, float("-inf")] * 5), torch.randint(0, 9, (40,), generator=g),
          torch.rand(33, generator=g) > 0.5, torch.randn(300, generator=g).half(), torch.full((7,), float("nan")),
          torch.randn(3000, generator=g, dtype=torch.float64) * 1e300, torch.zeros(0), torch.randn(8000, generator=g),
          torch.tensor(2.5), torch.randn(4, 4, requires_grad=True)]
    for x, many in zip(xs, describe_many(xs)):
        one = describe(x)
        assert str(many) == str(one) or _close(many, one), (str(many), str(one))
        assert (many.nan, many.pos_inf, many.neg_inf, many.min, many.max) == (one.nan, one.pos_inf, one.neg_inf,
                                                                              one.min, one.max)


def _close(a, b):
    return all(getattr(a, f) == getattr(b, f) or abs(getattr(a, f) - getattr(b, f)) <= 1e-5 * abs(getattr(b, f))
               for f in ("mean", "std"))


NET = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.register_buffer("seen", torch.tensor(12345))

    def forward(self, x):
        return self.fc(x)
"""


def test_a_whole_pickled_model_is_refused_with_one_line_and_listed_with_trust(tmp_path):
    """pytorch/examples save whole models (torch.save(model)): without --trust that is one line saying why and how;
    with it, the file is unpickled (its classes imported from the file's folder, from any working directory) and
    every module and optimizer in it is listed by its state dict."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "netdef.py").write_text(NET)
    save = ("import torch, netdef\nnet = netdef.Net()\ntorch.save(net, 'whole.pt')\n"
            "opt = torch.optim.Adam(net.parameters())\nnet(torch.ones(1, 3)).sum().backward()\nopt.step()\n"
            "torch.save({'model': net, 'optimizer': opt, 'epoch': 3}, 'ckpt.pt')\n")
    subprocess.run([sys.executable, "-c", save], cwd=project, check=True, timeout=120)
    refused = inspect(project / "whole.pt")
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.strip().splitlines() == [
        f"tensor-dap: error: cannot load {project / 'whole.pt'} as a torch checkpoint: it holds Python objects, not "
        "only tensors (a whole model saved with torch.save(model)?); loading them runs code from the file: add "
        "--trust if you trust it"]
    listed = inspect("--trust", project / "whole.pt")  # run from elsewhere: netdef is found beside the file
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.strip().splitlines()[1:]]
    assert names == ["seen", "fc.weight", "fc.bias"]  # state_dict order: the module's own, then its children's
    assert re.search(r"^seen\s+tensor\[\] i64 12345$", listed.stdout, re.MULTILINE)
    both = inspect("--trust", project / "ckpt.pt")
    assert both.returncode == 0, both.stderr
    rows = both.stdout.strip().splitlines()[1:]
    assert [r.split()[0] for r in rows[:3]] == ["model.seen", "model.fc.weight", "model.fc.bias"]
    assert any(r.startswith("optimizer.state.0.exp_avg ") for r in rows), rows  # dotted, as state_dict keys read


def test_tied_weights_are_named_once_and_the_values_beside_the_weights_are_listed(tmp_path):
    """nanoGPT's checkpoint: lm_head.weight is wte.weight (tied), and beside the weights it keeps iter_num,
    model_args, its config and the optimizer's hyper-parameters: what a user opens a checkpoint to find."""
    shared = torch.randn(6, 4)
    path = tmp_path / "ckpt.pt"
    torch.save({"model": {"wte.weight": shared.detach(), "lm_head.weight": shared.detach(),
                          "copy": shared.clone(), "row": shared[1], "empty": torch.empty(0), "empty2": torch.empty(0)},
                "iter_num": 10, "config": {"lr": 0.1, "name": "run\x1b[2J", "note": "x" * 500},
                "betas": (0.9, 0.99), "ids": list(range(100_000)), "nothing": None}, path)
    r = inspect(path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].endswith(": 6 tensors")
    assert re.search(r"^model\.lm_head\.weight +same tensor as model\.wte\.weight$", r.stdout, re.M)
    assert re.search(r"^model\.copy +tensor\[6, 4\]", r.stdout, re.M)  # equal values, its own storage: listed
    assert re.search(r"^model\.row +tensor\[4\]", r.stdout, re.M)  # a view of it, another shape: listed
    assert re.search(r"^model\.empty2 +tensor\[0\]", r.stdout, re.M)  # empty tensors share no data
    others = lines[lines.index(next(x for x in lines if x.endswith("other values"))):]
    assert others[0].endswith(": 7 other values")
    values = dict(re.match(r"(\S+) +(.*)$", line).groups() for line in others[1:])
    assert values["iter_num"] == "10" and values["config.lr"] == "0.1" and values["nothing"] == "None"
    assert values["betas"] == "(0.9, 0.99)" and values["ids"].startswith("[0, 1, 2, ") and len(values["ids"]) <= 100
    assert values["config.name"] == "'run\\x1b[2J'" and "\x1b" not in r.stdout
    assert values["config.note"] == "'" + "x" * 98 + "…"  # cut at the line's end
    assert values["ids"].endswith(", 15, …]")  # the first items only
    only_bad = inspect("--nonfinite", path)
    assert only_bad.returncode == 0 and "other values" not in only_bad.stdout


def _lightning_checkpoint(path, weight=1.0, kth=float("inf")):
    """What Lightning's Trainer.save_checkpoint writes (2.6): the weights, the optimizer, and each callback's state
    under a key made of its class and settings."""
    torch.save({"epoch": 0, "global_step": 16, "pytorch-lightning_version": "2.6.6",
                "state_dict": {"head.weight": torch.full((2, 2), weight), "head.bias": torch.zeros(2)},
                "callbacks": {
                    "ModelCheckpoint{'monitor': None, 'mode': 'min', 'every_n_train_steps': 0}": {
                        "kth_value": torch.tensor(kth), "best_model_score": None, "dirpath": "/ck/checkpoints"},
                    "EarlyStopping{'monitor': 'val_loss', 'mode': 'max'}": {"best_score": torch.tensor(-float("inf")),
                                                                          "wait_count": 0}},
                "optimizer_states": [{"state": {0: {"step": torch.tensor(16.0)}}, "param_groups": [{"lr": 1e-3}]}]},
               path)


def test_a_lightning_checkpoint_s_unscored_callbacks_are_not_counted_as_non_finite(tmp_path):
    """A healthy Lightning checkpoint keeps ModelCheckpoint's ``kth_value`` at inf (no monitor) and EarlyStopping's
    ``best_score`` at -inf until a score arrives: ``--nonfinite`` lists them apart and exits 0; a NaN weight, or a
    NaN score (no callback starts there), still fails it."""
    healthy = tmp_path / "healthy.ckpt"
    _lightning_checkpoint(healthy)
    r = inspect("--nonfinite", healthy)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "healthy.ckpt: 0 tensors holding NaN/Inf" in r.stdout
    assert "healthy.ckpt: 2 callback scores at ±inf, where Lightning starts them until a monitored score arrives" \
        in r.stdout
    assert ".kth_value" in r.stdout and ".best_score" in r.stdout
    listed = inspect(healthy)  # the full listing still shows what they hold
    assert listed.returncode == 0 and "+Inf!" in listed.stdout and "-Inf!" in listed.stdout
    broken = tmp_path / "broken.ckpt"
    _lightning_checkpoint(broken, weight=float("nan"))
    r = inspect("--nonfinite", broken)
    assert r.returncode == 1 and "state_dict.head.weight" in r.stdout
    assert "broken.ckpt: 1 tensor holding NaN/Inf\n" in r.stdout
    nan_score = tmp_path / "nan_score.ckpt"
    _lightning_checkpoint(nan_score, kth=float("nan"))
    r = inspect("--nonfinite", nan_score)
    counted, apart = r.stdout.split("1 callback score at ±inf")
    assert r.returncode == 1 and ".kth_value" in counted and ".best_score" in apart


def test_sparse_and_jagged_nested_tensors_load_safely_in_a_fresh_process(tmp_path):
    """A safe load builds a jagged nested tensor only once torch's nested and dynamo modules are imported, which a
    fresh ``tensor-dap inspect`` had not: the file was refused as 'Python objects, not only tensors'."""
    path = tmp_path / "graph.pt"
    adj = (torch.eye(50) + torch.diag(torch.ones(49), 1)).to_sparse()
    torch.save({"adj": adj, "csr": adj.to_sparse_csr(), "bad": torch.tensor([1.0, float("nan")]).to_sparse(),
                "seqs": torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(4, 3)], layout=torch.jagged)}, path)
    r = inspect(path)
    assert r.returncode == 0 and "Warning" not in r.stderr, r.stderr
    rows = {line.split()[0]: line.split(None, 1)[1] for line in r.stdout.splitlines()[1:]}
    assert rows["adj"].startswith("tensor[50, 50] sparse_coo nnz=99 ") and "values∈[1, 1]" in rows["adj"]
    assert "sparse_csr nnz=99" in rows["csr"] and "NaN!×1" in rows["bad"]
    assert rows["seqs"].startswith("NestedTensor[2, ?, 3] nested n=18 "), rows["seqs"]


def test_the_listing_ends_by_naming_the_tensors_that_hold_nan_or_inf(tmp_path):
    """One NaN in an optimizer's state among a checkpoint's rows is a ``NaN!×1`` somewhere in the middle: the listing
    ends with a line naming the tensors that hold NaN/Inf (the first five); a Lightning callback's unscored ±inf is
    not one of them, and a healthy file has no such line."""
    state = {f"layers.{i}.weight": torch.randn(4, 4) for i in range(12)}
    state["layers.3.weight"][1, 2] = float("nan")
    state["layers.9.weight"][0, 0] = float("inf")
    torch.save({"model": state, "epoch": 3}, tmp_path / "ckpt.pt")
    r = inspect(tmp_path / "ckpt.pt")
    last = r.stdout.strip().splitlines()[-1]
    assert r.returncode == 0
    assert last.endswith("ckpt.pt: 2 of 12 tensors hold NaN/Inf: model.layers.3.weight, model.layers.9.weight "
                         "(--nonfinite lists only those)"), r.stdout
    torch.save({f"w{i}": torch.full((2,), float("nan")) for i in range(7)}, tmp_path / "many.pt")
    assert inspect(tmp_path / "many.pt").stdout.strip().splitlines()[-1].endswith(
        "many.pt: 7 of 7 tensors hold NaN/Inf: w0, w1, w2, w3, w4, … (--nonfinite lists only those)")
    healthy = tmp_path / "healthy.ckpt"
    _lightning_checkpoint(healthy)
    assert "hold NaN/Inf" not in inspect(healthy).stdout and "holds NaN/Inf" not in inspect(healthy).stdout
