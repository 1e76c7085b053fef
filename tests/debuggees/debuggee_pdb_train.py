"""A tiny training step that stops at breakpoint(): driven through a pseudo-terminal by test_pdb_session.py."""
import torch
from torch import nn


def state(model):
    """Everything `shapes` must leave untouched: modes, BatchNorm stats, RNG."""
    bn = model[1]
    return (model.training, bn.training, bn.running_mean.clone(), bn.running_var.clone(),
            int(bn.num_batches_tracked), torch.random.get_rng_state())


def same(a, b):
    return all(torch.equal(p, q) if isinstance(p, torch.Tensor) else p == q for p, q in zip(a, b))


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 4))
    x = torch.randn(32, 8)
    target = torch.randn(32, 4)
    loss = ((model(x) - target) ** 2).mean()
    loss.backward()
    model[0].bias.grad.zero_()
    logits = torch.randn(4, 10)
    logits[1, 3] = float("nan")
    batch = {"input": x, "target": target, "ids": [1, 2, 3]}
    elsewhere = torch.zeros(3, device="meta")
    w = torch.zeros(5)
    before = state(model)
    breakpoint()  # BREAKPOINT  # noqa: T100 - the point of this script
    w.add_(1)  # changed in place: `display w` must notice
    print("finished", same(before, state(model)), elsewhere.shape, batch["ids"], logits.shape, flush=True)


if __name__ == "__main__":
    main()
