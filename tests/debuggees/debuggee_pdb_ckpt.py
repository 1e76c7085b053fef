"""Resumes from a checkpoint of a narrower model: load_state_dict fails with a long size-mismatch message."""
from torch import nn

checkpoint = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)).state_dict()
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
model.load_state_dict(checkpoint)
