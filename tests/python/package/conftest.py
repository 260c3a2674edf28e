"""Fixtures of the Python package tests: weights written by the official safetensors package, a private cache."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import small_model  # noqa: E402


@pytest.fixture
def weights_file(tmp_path: Path) -> Path:
    return small_model.make_weights(tmp_path / "model.safetensors")


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"
