"""compare_state_dict: agrees with load_state_dict about what fails, and names the cause (prefix, rename, shape)."""

import copy

import pytest
import torch
from torch import nn

from tensor_dap import compare_state_dict
from tensor_dap.checks.state_dict_causes import mismatch_note, prefix_fix, renames

pytestmark = pytest.mark.timeout(60)


def net(classes=10):
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, classes))


def loads_strictly(model, state):
    try:
        copy.deepcopy(model).load_state_dict(state)
        return True
    except RuntimeError:
        return False


def test_matching_checkpoint_is_ok_and_model_untouched():
    model = net()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    r = compare_state_dict(model, copy.deepcopy(model.state_dict()))
    assert r.verdict == "ok" and loads_strictly(model, model.state_dict())
    assert r.summary == "9 of 9 model keys load as saved"
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.compile's own imports
def test_dataparallel_and_compile_prefixes_with_a_fix_that_works(tmp_path):
    model = net()
    saved = nn.DataParallel(net()).state_dict()  # 'module.' on every key
    assert not loads_strictly(model, saved)
    path = tmp_path / "dp.pt"
    torch.save({"model": saved, "epoch": 3}, path)
    r = compare_state_dict(model, str(path))
    assert r.verdict == "problem" and r.facts["prefix"] == {"strip": "module.", "add": ""}
    fix = next(f for f in r.findings if f.subject == "module.")
    assert "DataParallel" in fix.message and "removeprefix('module.')" in fix.advice
    assert any("checkpoint['model']" == f.subject for f in r.findings)
    fixed = {k.removeprefix("module."): v for k, v in saved.items()}  # the advice, applied
    assert loads_strictly(model, fixed)
    compiled = torch.compile(net()).state_dict()  # keys start with '_orig_mod.' (nothing is compiled yet)
    c = compare_state_dict(model, compiled)
    assert c.facts["prefix"]["strip"] == "_orig_mod." and "torch.compile" in c.findings[0].message


def test_checkpoint_of_a_submodule():
    class Wrapped(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = net()
            self.head = nn.Linear(10, 2)

    r = compare_state_dict(Wrapped(), net().state_dict())
    by = {f.subject: f for f in r.findings}
    assert "model.backbone.load_state_dict(state)" in by["backbone."].advice
    assert "head" in by and "strict=False would leave them at their initial" in by["head"].message


def test_missing_and_unexpected_agree_with_load_state_dict():
    class Old(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Linear(4, 4)
            self.extra = nn.Linear(4, 3)

    class New(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Linear(4, 4)
            self.gate = nn.Linear(4, 1)

    model = New()
    state = Old().state_dict()
    r = compare_state_dict(model, state)
    outcome = copy.deepcopy(model).load_state_dict(state, strict=False)
    assert r.facts["missing"] == outcome.missing_keys and r.facts["unexpected"] == outcome.unexpected_keys
    assert {f.subject for f in r.findings if f.level == "problem"} == {"gate", "extra"}


def test_renamed_layers_matched_by_shape_and_position():
    class A(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Linear(8, 8)
            self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))
            self.fc = nn.Linear(8, 2)

    class B(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Linear(8, 8)
            self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))
            self.classifier = nn.Linear(8, 2)

    r = compare_state_dict(B(), A().state_dict())
    messages = " | ".join(f.message for f in r.findings)
    assert "'layers' renamed to 'blocks' in 3 modules" in messages
    assert "checkpoint 'fc' looks like model 'classifier'" in messages
    assert r.facts["missing"] == [] and r.facts["unexpected"] == []  # every key is explained
    pairs = {d["checkpoint"]: d["model"] for d in r.facts["renamed"]}
    assert pairs["layers.2.weight"] == "blocks.2.weight" and pairs["fc.bias"] == "classifier.bias"


def test_shape_mismatch_notes_and_strict_false_still_raises():
    model = net(10)
    state = net(1000).state_dict()
    r = compare_state_dict(model, state)
    assert r.facts["shape_mismatch"] == ["4.weight", "4.bias"]
    assert "number of classes/outputs: 10 here, 1000 in the checkpoint" in r.findings[0].message
    with pytest.raises(RuntimeError, match="size mismatch"):
        copy.deepcopy(model).load_state_dict(state, strict=False)  # what the info finding says
    assert any("it still raises" in f.message for f in r.findings)
    shapes = {"attn.c_attn.weight": (768, 2304)}
    assert "transposed" in mismatch_note("attn.c_attn.weight", shapes, {"attn.c_attn.weight": (2304, 768)})[0]


def test_pure_helpers_on_key_maps():
    mine = {"a.w": (2,), "b.w": (3,)}
    assert prefix_fix(mine, {"module.a.w": (2,), "module.b.w": (3,)}).strip == "module."
    assert prefix_fix(mine, {"x.w": (9,)}) is None
    found, missing, unexpected = renames(mine, {"a.w": (2,), "c.w": (3,)}, ["b.w"], ["c.w"])
    assert found[0][1] == [("c.w", "b.w")] and missing == unexpected == []
    found, missing, unexpected = renames(mine, {"a.w": (2,), "c.w": (4,)}, ["b.w"], ["c.w"])
    assert not found and missing == ["b.w"] and unexpected == ["c.w"]  # another shape: not a rename


def test_bad_inputs_are_findings(tmp_path):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"\x00not a checkpoint")
    assert "cannot load" in compare_state_dict(net(), str(junk)).findings[0].message
    assert "no state dict found" in compare_state_dict(net(), {"epoch": 1}).findings[0].message
    evil = tmp_path / "evil.pt"
    torch.save({"w": torch.zeros(1), "obj": nn.Linear(1, 1)}, evil)  # a pickled module: refused by weights_only
    assert compare_state_dict(net(), str(evil)).verdict == "problem"
    assert compare_state_dict(net(), {"0.weight\x1b[2J": torch.zeros(8, 3, 3, 3)}).verdict == "problem"


def test_gpt2_style_checkpoint_transposed_square_and_tied_weights():
    """The situation nanoGPT's from_pretrained handles by hand: HF GPT-2 stores Conv1D weights transposed
    (the square attention projection too, where the shape cannot tell), and omits the head tied to the embedding."""

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(8, 24)
            self.c_proj = nn.Linear(8, 8)  # square

    class TinyGPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(30, 8)
            self.h = nn.ModuleList([Block(), Block()])
            self.lm_head = nn.Linear(8, 30, bias=False)
            self.lm_head.weight = self.wte.weight  # tied

    model = TinyGPT()
    hf = {k: (v.t() if k.endswith(("c_attn.weight", "c_proj.weight")) else v)
          for k, v in model.state_dict().items() if k != "lm_head.weight"}
    r = compare_state_dict(model, hf)
    by = {f.subject: f for f in r.findings}
    assert "transposed" in by["h.0.c_attn.weight, h.1.c_attn.weight"].message
    assert "probably transposed too" in by["h.0.c_proj.weight, h.1.c_proj.weight"].message
    assert "tied to wte.weight" in by["lm_head.weight"].message and r.facts["missing"] == []
    fixed = {k: (v.t() if k.endswith(("c_attn.weight", "c_proj.weight")) else v) for k, v in hf.items()}
    fixed["wte.weight"] = torch.randn(30, 8)
    target = copy.deepcopy(model)
    assert target.load_state_dict(fixed, strict=False).missing_keys == ["lm_head.weight"]
    assert torch.equal(target.lm_head.weight, fixed["wte.weight"])  # loaded through the tie, as the warning says
