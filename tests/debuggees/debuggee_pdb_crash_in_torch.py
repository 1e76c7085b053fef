"""Crashes inside torch's own Python code: binary_cross_entropy refuses a probability outside [0, 1]."""

import torch
import torch.nn.functional as F


def loss_of(probs, labels):
    scaled = probs * 2  # the bug: no longer probabilities
    return F.binary_cross_entropy(scaled, labels)  # CALLS-TORCH


loss_of(torch.tensor([0.3, 0.8]), torch.tensor([0.0, 1.0]))
