"""Where tensor_dap writes, under the folder the program runs in: one ``.tensor_dap/`` holding incident bundles and
hang stacks, profiles, and the demo's runs (VS Code's extension and ``.gitignore`` advice name the same folders)."""

from __future__ import annotations

import os

ROOT = ".tensor_dap"
INCIDENTS = os.path.join(ROOT, "incidents")  # bundles (<time>-step<N>) and hang stacks (<time>-hang)
PROFILES = os.path.join(ROOT, "profiles")
DEMO = os.path.join(ROOT, "demo")
