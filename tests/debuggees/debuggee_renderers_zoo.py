"""Debuggee for test_debugpy_renderers: a training-loop frame holding every kind of value the plugin renders.

Run under the real debugpy adapter; the test stops at the BP-loop line (conditionally) and walks
the Variables panel. The tensor zoo is the foundation's (tests/harness/zoo.py's ZOO).
"""

import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "harness"))

import torch
from zoo import ZOO
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the zoo's beta/deprecated kinds warn on creation; nothing else may
        zoo = {name: factory() for name, factory, *_ in ZOO}
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Dropout(0.1), nn.Linear(256, 10))
    model[0].register_forward_hook(lambda module, args, out: None)
    encoder = nn.ModuleDict({"embed": nn.Embedding(1000, 64), "conv": nn.Conv2d(3, 16, 3, stride=2),
                             "norm": nn.BatchNorm1d(64), "rnn": nn.LSTM(64, 32, num_layers=2)})
    encoder["embed"].weight.requires_grad_(False)
    encoder.eval()
    lazy = nn.Sequential(nn.LazyLinear(8), nn.ReLU())  # stopped before its first forward: shapes unknown
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    sgd = torch.optim.SGD([{"params": encoder["conv"].parameters(), "lr": 0.1},
                           {"params": encoder["rnn"].parameters(), "lr": 0.01}], momentum=0.9)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(sgd, patience=2)
    data = TensorDataset(torch.randn(1000, 784), torch.randint(0, 10, (1000,)))
    loader = DataLoader(data, batch_size=32, shuffle=True)
    for step, (inputs, labels) in enumerate(loader):
        batch = {"input": inputs, "label": labels}
        pair = [inputs[:2], labels[:2]]
        logits = model(inputs)
        top = logits.max(dim=1)  # a torch.return_types structseq: (values, indices)
        loss = nn.functional.cross_entropy(logits, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        weight = model[0].weight
        print("step", step, float(loss), flush=True)  # BP-loop
        if step == 3:
            break
    del zoo, encoder, lazy, top, plateau, batch, pair, weight
    print("done", flush=True)


if __name__ == "__main__":
    main()
