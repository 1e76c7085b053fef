"""Fixtures for the profiling tests: a small real training script in a fresh folder."""

import pytest
from profiled import TRAIN


@pytest.fixture
def train_script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(TRAIN)
    return path
