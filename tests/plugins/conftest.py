"""Plugin tests load plugins into the process's registries: each test puts them back, and
starts with the installed entry points not yet read (earlier tests may have read them)."""

from __future__ import annotations

import pytest

from opbench.plugins import loading


@pytest.fixture(autouse=True)
def isolated_plugins(monkeypatch):
    state = loading.snapshot()
    monkeypatch.setattr(loading, "_entry_points_loaded", False)
    yield
    loading.restore(state)
