"""A tiny training loop: the end-to-end test profiles it, debugs it and inspects its tensors."""
import torch
from torch import nn


def make_model():
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def train_step(model, opt, x, y):
    out = model(x)
    loss = nn.functional.cross_entropy(out, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


def main(steps=20):
    torch.manual_seed(0)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    weights = model[0].weight
    for step in range(steps):
        x = torch.randn(8, 16)
        y = torch.randint(0, 4, (8,))
        loss = train_step(model, opt, x, y)
        print(f"step {step} loss {loss.item():.4f}")  # BP: the e2e test stops here
    return loss, weights


if __name__ == "__main__":
    main()
