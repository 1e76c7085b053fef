"""A script whose model lives at module level, with breakpoints before and after backward: driven by
tests/debug/test_pdb_views.py in a narrow pseudo-terminal."""
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(32, 8)
inputs_of_the_batch_with_a_name_long_enough_to_crowd_the_table = torch.randn(32, 784) * 1e-3
mask = torch.ones(32, 1, 1, 2048).expand(32, 16, 2048, 2048)


def step():
    breakpoint()  # BP-before-backward  # noqa: T100 - the point of this script
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    return loss


loss = step()
breakpoint()  # BP-top  # noqa: T100 - the point of this script
print("finished", flush=True)
