"""The debugpy side: what VS Code's Variables panel, hover and Watch show, and who is attached.

``nodes`` says which view renders which type, ``values`` gives the one-line value, ``expand``
the ordered, watchable children, ``pacing`` keeps every render and every burst inside its time
budget, ``attached`` answers who is watching (VS Code, a terminal, nobody), ``inspector`` answers the
VS Code extension's tensor inspector. ``listen`` starts debugpy for ``tensor-dap run --listen`` (one
port per rank, loopback unless told otherwise); ``launch`` writes the launch.json templates
(``launch_templates.json``) into a project, merging with ``jsonc`` so comments survive. The debugpy plugin
(``pydevd_plugins/extensions``) is a thin adapter over the names exported here; nothing here
imports torch.
"""

from .expand import children
from .nodes import expandable, kind_of
from .pacing import debugger_pacer
from .values import fallback_children, fallback_text, value_text

__all__ = ["children", "debugger_pacer", "expandable", "fallback_children", "fallback_text", "kind_of", "value_text"]
