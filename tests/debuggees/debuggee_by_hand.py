"""A loop with no torch.optim optimizer, as pytorch/examples' word language model writes it:
``model.zero_grad()``, backward, clip, then ``p.data.add_(p.grad, alpha=-lr)``. From step 3 its
``RootAct`` switches to a "safe" square root through ``torch.where``, whose unused branch still sends
NaN gradients back: NaN from there on. Run it under ``tensor-dap run --break-on-nan``; it prints
TRAINING-DONE when the loop finishes.
"""

import torch
import torch.nn.functional as F
from torch import nn


class RootAct(nn.Module):
    def forward(self, x, root):
        if root:
            return torch.where(x > 0, torch.sqrt(x), torch.zeros_like(x))  # BIRTH
        return torch.relu(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp, self.act, self.out = nn.Linear(6, 12), RootAct(), nn.Linear(12, 1)

    def forward(self, x, root):
        return self.out(self.act(self.inp(x), root))


def main():
    torch.manual_seed(0)
    model = Net()
    x, y = torch.randn(8, 6), torch.randn(8, 1)
    lr = 0.05
    for step in range(6):
        model.zero_grad()
        loss = F.mse_loss(model(x, step >= 3), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
    print("TRAINING-DONE", flush=True)


if __name__ == "__main__":
    main()
