"""Checks: one call each, a verdict with findings that name each offender, as a rich table or JSON.

``check_shapes``, ``check_devices`` and ``check_gradients`` look at a model; ``check_leakage`` and
``check_label_leakage`` at data splits (``tabular`` reads tensors, arrays and frames, ``rowhash``
compares rows); ``compare_state_dict`` at a checkpoint against a model; ``check_dataloader`` at a
DataLoader's settings and speed; ``doctor`` at the environment (``probes`` asks other processes).
Each returns a ``CheckResult`` (pure data, ``result``); ``render`` lays results out for a terminal,
``to_dict()`` for machines (``schema``).
"""

from .dataloader import check_dataloader
from .devices import check_devices
from .doctor import doctor
from .gradients import check_gradients
from .label_leakage import check_label_leakage
from .leakage import check_leakage
from .result import CheckResult, Finding
from .shapes import check_shapes
from .state_dict import compare_state_dict

__all__ = ["CheckResult", "Finding", "check_dataloader", "check_devices", "check_gradients", "check_label_leakage",
           "check_leakage", "check_shapes", "compare_state_dict", "doctor"]
