"""Small transformer, MLP and CNN trainings, each with one realistic bug planted at step ``BUG_STEP``.

Each bug's birthplace is the line marked ``# BIRTH: <bug>`` below: the tests look the line up
here (nothing about the answer is hard-coded in them) and expect the report to name it, with
the module whose own code runs it, the phase and the op in ``EXPECTED``.

``python origins.py BUG [--loop]`` trains until the bug fires (``--loop``: an unchanged loop
with no ``w.step``), for the debugger tests; it prints TRAINING-DONE at the end.
"""

from __future__ import annotations

import math
import sys

import torch
import torch.nn.functional as F
from torch import nn

BUG_STEP = 4
# bug -> (module, phase, op): the birthplace a report must name
EXPECTED = {
    "masked_softmax": ("blocks.0.attn", "forward", "softmax"),
    "where_sqrt": ("blocks.1.mlp", "backward", "SqrtBackward0"),
    "log_zero_loss": (None, "loss", "log"),
    "zero_norm": ("norm", "forward", "div"),
    "exploding_lr": (None, "loss", "mse_loss"),
    "fp16_matmul": ("proj", "forward", "matmul"),
    "nan_batch": ("inp", "input", "linear"),
    # an Inf in the batch that the LSTM's gates saturate on: its forward stays finite, its backward makes the NaN
    "inf_batch_rnn": ("rnn", "input", "lstm"),
    # a custom autograd.Function in the model's own forward, whose backward divides by zero; fed to a submodule
    "custom_backward": ("", "backward", "SafeLogBackward"),
}
BUGS = tuple(EXPECTED)


def birth_line(bug: str) -> int:
    """The line of this file marked as ``bug``'s birthplace."""
    with open(__file__, encoding="utf-8") as f:
        for number, text in enumerate(f, 1):
            if text.rstrip().endswith(f"# BIRTH: {bug}"):
                return number
    raise KeyError(bug)


# ------------------------------------------------------------------ a tiny GPT

class Attention(nn.Module):
    def __init__(self, d: int, heads: int, block: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.attn_dropout = nn.Dropout(0.1)
        self.register_buffer("causal", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x, pad):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        keep = (self.causal[:, :, :t, :t] > 0) & pad[:, None, None, :]  # a padded key is never attended to
        att = att.masked_fill(~keep, float("-inf"))
        att = F.softmax(att, dim=-1)  # BIRTH: masked_softmax
        att = self.attn_dropout(att)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.out(y)


class MLP(nn.Module):
    def __init__(self, d: int, sqrt_act: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(d, 4 * d)
        self.proj = nn.Linear(4 * d, d)
        self.sqrt_act = sqrt_act

    def forward(self, x):
        h = self.fc(x)
        if self.sqrt_act:  # a "safe" sqrt activation: torch.where does not stop sqrt's NaN gradient
            h = torch.where(h > 0, torch.sqrt(h), torch.zeros_like(h))  # BIRTH: where_sqrt
        else:
            h = F.gelu(h)
        return self.proj(h)


class Block(nn.Module):
    def __init__(self, d: int, heads: int, block: int, sqrt_act: bool) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, heads, block)
        self.mlp = MLP(d, sqrt_act)

    def forward(self, x, pad):
        x = x + self.attn(self.ln1(x), pad)
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 32, d: int = 16, heads: int = 2, block: int = 8, layers: int = 2) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.ModuleList(Block(d, heads, block, False) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx, pad, targets=None):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        for block in self.blocks:
            x = block(x, pad)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())


# ------------------------------------------------------------------ an MLP and a CNN

class HalfMatmul(nn.Module):
    """A projection computed in float16 (as a hand-written mixed-precision kernel would)."""

    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(d_in, d_out) / d_in ** 0.5)

    def forward(self, x):
        return (x.half() @ self.weight.half()).float()  # BIRTH: fp16_matmul


class SafeLog(torch.autograd.Function):
    """log, clamped in its forward; its hand-written backward forgot the clamp: 1/0 where the input is 0."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.log(x.clamp_min(1e-6))

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / x  # BIRTH: custom_backward.inside


class Net(nn.Module):
    def __init__(self, half: bool = False) -> None:
        super().__init__()
        self.inp = nn.Linear(8, 32)
        self.act = nn.Tanh() if not half else nn.Identity()  # float16 needs large inputs to overflow
        self.proj = HalfMatmul(32, 32) if half else nn.Linear(32, 32)
        self.head = nn.Linear(32, 4)
        self.gated = False  # gates its features through SafeLog (the custom_backward bug)

    def forward(self, x):
        h = self.act(self.inp(x))  # BIRTH: nan_batch
        if self.gated:  # the features a gate closed are exactly 0 there, and SafeLog's backward divides by them
            h = self.proj(SafeLog.apply(h * (h > 0).float()))  # BIRTH: custom_backward
        else:
            h = self.proj(h)
        return self.head(self.act(h))


class L2Norm(nn.Module):
    def forward(self, x):
        return x / x.norm(dim=(2, 3), keepdim=True)  # BIRTH: zero_norm


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1, bias=False)
        self.norm = L2Norm()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        h = self.norm(F.relu(self.conv(x)))
        return self.fc(h.mean(dim=(2, 3)))


class SeqNet(nn.Module):
    """A sequence classifier: an LSTM read at its last step (pytorch/examples' mnist_rnn, smaller)."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(6, 16, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        out, _ = self.rnn(x)  # BIRTH: inf_batch_rnn
        return self.head(out[:, -1])


def soft_target_loss(logits, y_soft):
    """Cross-entropy against soft targets, hand-written: log of a probability that underflowed to 0."""
    probs = logits.softmax(-1)
    return -(y_soft * torch.log(probs)).sum(-1).mean()  # BIRTH: log_zero_loss


# ------------------------------------------------------------------ the trainings

def build(bug: str, seed: int = 0):
    """(model, optimizer, batch(step) -> tuple, train_step(*batch) -> loss) for one planted bug."""
    if bug not in EXPECTED:
        raise SystemExit(f"unknown bug {bug!r}; choose from {', '.join(BUGS)}")
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    if bug in ("masked_softmax", "where_sqrt"):
        model = TinyGPT()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        data = [torch.randint(0, 32, (4, 8), generator=gen) for _ in range(16)]

        def batch(step):
            idx = data[step % len(data)]
            pad = torch.ones(4, 8, dtype=torch.bool)
            pad[1, 6:] = False  # a padded sequence
            if bug == "masked_softmax" and step == BUG_STEP:
                pad[2, 0] = False  # its first key is padding too: query 0 may attend to nothing
            model.blocks[1].mlp.sqrt_act = bug == "where_sqrt" and step >= BUG_STEP
            return idx, pad, torch.roll(idx, -1, dims=1)

        def train_step(idx, pad, targets):
            optimizer.zero_grad()
            _, loss = model(idx, pad, targets)
            loss.backward()
            optimizer.step()
            return loss
        return model, optimizer, batch, train_step
    if bug in ("zero_norm", "inf_batch_rnn"):  # classifiers of (x, y) batches, one bug planted in x
        if bug == "zero_norm":
            model = CNN()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
            shape = (6, 1, 5, 5)
        else:
            model = SeqNet()
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
            shape = (8, 5, 6)
        data = [(torch.randn(shape, generator=gen), torch.randint(0, 3, shape[:1], generator=gen)) for _ in range(8)]

        def batch(step):
            x, y = data[step % len(data)]
            if step == BUG_STEP:
                x = x.clone()
                if bug == "zero_norm":
                    x[2] = 0.0  # a blank image: every feature map is zero, and so is its norm
                else:
                    x[5, 2, 1] = float("inf")  # a corrupt record: the sensor's overflow value
            return x, y

        def train_step(x, y):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            return loss
        return model, optimizer, batch, train_step
    model = Net(half=bug == "fp16_matmul")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = [(torch.randn(16, 8, generator=gen), torch.randn(16, 4, generator=gen)) for _ in range(8)]

    def batch(step):
        x, y = data[step % len(data)]
        x, y, scale = x.clone(), y.clone(), 1.0
        if step == BUG_STEP and bug == "nan_batch":
            x[3, 1] = float("nan")
        if step == BUG_STEP and bug == "fp16_matmul":
            x = x * 3e4  # large but representable activations: their float16 products overflow
        model.gated = bug == "custom_backward" and step >= BUG_STEP
        if bug == "exploding_lr" and step >= BUG_STEP:
            for group in optimizer.param_groups:  # a warm-up schedule with a typo: x100 every step
                group["lr"] *= 100.0
        if bug == "log_zero_loss":
            y = F.one_hot(y.abs().argmax(-1), 4).float()  # hard targets written as soft ones
            if step == BUG_STEP:
                scale = 1e4  # a temperature gone to 1e-4: probabilities underflow to exactly 0
        return x, y, scale

    def train_step(x, y, scale):
        optimizer.zero_grad()
        out = model(x)
        if bug == "log_zero_loss":
            loss = soft_target_loss(out * scale, y)
        else:
            loss = F.mse_loss(out, y)  # BIRTH: exploding_lr
        loss.backward()
        optimizer.step()
        return loss
    return model, optimizer, batch, train_step


def main(argv: list[str]) -> int:
    import tensor_dap

    bug, loop = argv[0], "--loop" in argv
    model, optimizer, batch, train_step = build(bug)
    with tensor_dap.watch(model, optimizer, capture=False) as w:
        for step in range(BUG_STEP + 3):
            if loop:
                train_step(*batch(step))
            else:
                w.step(train_step, *batch(step))
    print("TRAINING-DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
