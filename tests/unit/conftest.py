"""Fixtures shared by the unit tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # graph_ops, for tests in every sub-folder

import graph_ops  # noqa: E402


@pytest.fixture
def join_ops():
    """`t_add` and `t_concat` (tests/unit/graph_ops.py) registered for one test."""
    with graph_ops.registered():
        yield
