"""The finding ``check_gradients`` and ``check_devices`` share: layers kept in a plain Python list or dict, which
torch does not register (``probe.unregistered``)."""

from __future__ import annotations

from typing import Any

from ..format import plural
from ..probe.unregistered import unregistered
from .result import PROBLEM, WARNING, Finding


def unregistered_findings(model: Any, home: str | None = None) -> list[Finding]:
    """One finding per plain container of layers; a problem where they sit on another device than ``home``."""
    found = []
    for group in unregistered(model):
        devices = sorted({str(p.device) for _, p in group.params})
        away = [d for d in devices if home is not None and d != home]
        where = f", on {' + '.join(away)} while the model is on {home} (.to() does not move them)" if away else ""
        found.append(Finding(
            PROBLEM if away else WARNING, group.holder,
            f"a plain Python {group.kind} holding {plural(len(group.params), 'parameter')}{where}: "
            f"model.parameters() (so the optimizer), state_dict() and .to() leave them out, so they never train",
            "use nn.ModuleList (nn.ModuleDict for a dict, nn.ParameterList for parameters)"))
    return found
