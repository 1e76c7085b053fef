"""Summaries: pure data about tensors and the objects around them, and the views every surface shares.

``describe()`` turns any tensor into a ``TensorSummary`` in one bounded pass (``_stats`` on CPU,
``_device`` on accelerators, over the views ``_views`` makes, within a ``Budget``), and
``describe_many`` many small ones at once (``_batch``); ``modules`` does the same for an
``nn.Module`` and ``objects`` for optimizers, LR schedulers, data loaders, grad scalers and
generators; ``histogram`` bins a tensor's values. ``line`` (the one-line text) and
``tables`` (rich tables) render summaries; the DAP, pdb and CLI views build on them.
"""

from .budget import DEFAULT_BUDGET, VALUES_SHOWN, Budget
from .tensor import describe, describe_many, plain_view, summarize
from .model import TensorSummary, from_json_number, jsonable

__all__ = ["DEFAULT_BUDGET", "VALUES_SHOWN", "Budget", "TensorSummary", "describe", "describe_many", "from_json_number",
           "jsonable",
           "plain_view", "summarize"]
