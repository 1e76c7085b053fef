"""What the pdb prints for the objects around tensors, at a script's top level, in a narrow terminal (pexpect)."""

import os
import re
import sys

import pexpect
import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "debuggees",
                      "debuggee_pdb_toplevel.py")
PROMPT = "(Pdb) "
WIDTH = 80


def _run(child, command):
    child.sendline(command)
    child.expect_exact(PROMPT)
    return child.before.split("\n", 1)[1] if "\n" in child.before else ""


@pytest.mark.timeout(120)
def test_objects_grads_and_tensors_at_top_level():
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONBREAKPOINT", "COLUMNS")}
    env.update(PYTHONBREAKPOINT="tensor_dap.set_trace", TERM="dumb", NO_COLOR="1")
    child = pexpect.spawn(sys.executable, [SCRIPT], env=env, encoding="utf-8", timeout=60, dimensions=(50, WIDTH))
    try:
        child.expect_exact(PROMPT)
        # inside step(): no module among the locals, so grads finds the global model; no backward yet
        out = _run(child, "grads")
        assert "no gradients yet: none of the 6 trainable parameters of model has a .grad" in " ".join(out.split())
        assert "total norm" not in out

        child.sendline("c")
        child.expect_exact(PROMPT)
        out = _run(child, "p model")
        assert out.strip() == "Sequential(5) 4,996 params f32 cpu train"
        assert _run(child, "p! model").startswith("Sequential(\r\n  (0): Linear(in_features=8, out_features=64")
        assert re.fullmatch(r"AdamW lr=0\.001 1 group 4,996 params state \S+ KiB step=1", _run(child, "p opt").strip())
        assert _run(child, "pp [model, 3]").startswith("[Sequential(")  # containers without tensors: pdb's own

        out = _run(child, "t")
        lines = out.rstrip().splitlines()
        assert all(len(line) <= WIDTH for line in lines), lines  # one line per row, cut with …, never wrapped
        assert "1 model (t NAME lists the parameters)" in out and re.search(r"^model +Sequential\(5\) 4,996", out, re.M)
        assert "model.0.weight" not in out  # no wall of parameters
        assert re.search(r"^x +tensor\[32, 8\]", out, re.M) and re.search(r"^mask +tensor\[32, 16, 2048, 2048\]",
                                                                           out, re.M)
        assert re.search(r"^inputs_of_the_batch\S*… +tensor\[32, 784\]", out, re.M)
        assert re.search(r"^loss +requires_grad +tensor\[\] ", out, re.M)
        assert "model.0.weight" in _run(child, "t model")  # named: its parameters

        out = _run(child, "grads")
        assert "gradients of model" in out and re.search(r"total norm \d", out)
        out = _run(child, "grads 2")  # a submodule as the table names its rows (2.weight): under the model
        assert "gradients of model.2" in out and re.search(r"^weight ", out, re.M) and "0.weight" not in out, out
        assert "gradients of model.2" in _run(child, "grads model.2")
        out = _run(child, "grads 7")
        assert "model (Sequential) has no submodule or attribute '7'" in " ".join(out.split()), out
        child.sendline("c")
        child.expect_exact("finished")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)


def test_the_tensors_table_tells_a_layer_s_weight_from_its_bias():
    """Names longer than the name column are cut in the middle, not at the end, where minGPT's
    'model.transformer.h.0.ln_1.weight' and '.bias' both read 'model.transformer.h.0.ln_1.…'."""
    import io

    import torch
    from rich.console import Console

    from tensor_dap.debug.views import tensors
    from tensor_dap.probe.scan import tensor_rows

    model = torch.nn.ModuleDict({"transformer": torch.nn.ModuleDict({"h": torch.nn.ModuleList(
        [torch.nn.ModuleDict({"ln_1": torch.nn.LayerNorm(4)})])})})
    found = [(f"model.{name}", p) for name, p in model.named_parameters()]
    console = Console(file=io.StringIO(), width=120, no_color=True)
    console.print(tensors(tensor_rows(found)))
    names = [line.split()[0] for line in console.file.getvalue().splitlines()[2:] if line.strip()]
    assert names == ["model…h.0.ln_1.weight", "model…h.0.ln_1.bias"], names
