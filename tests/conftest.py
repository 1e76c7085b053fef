"""Tests mirror the package; the DAP client and shared fixtures live in harness/, the debugged scripts in debuggees/."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "harness"))
