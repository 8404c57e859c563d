"""Plugin tests load plugins into the process's registries: each test puts them back."""

from __future__ import annotations

import pytest

from opbench.plugins.loading import restore, snapshot


@pytest.fixture(autouse=True)
def isolated_plugins():
    state = snapshot()
    yield
    restore(state)
