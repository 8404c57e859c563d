"""Tests run on the CPU: Triton kernels go through Triton's interpreter.

TRITON_INTERPRET must be set before triton.jit decorates anything, so it is set here,
before any test module imports opbench.kernels.
"""

import gc
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")
# The CLI's tables are read at their width off a terminal (cli/console.py: 160 columns unless
# COLUMNS says otherwise). Under pytest-xdist a worker inherits COLUMNS=80 and LINES=24: GNU
# readline, imported in the controlling process, exports them to its C environment, which the
# workers start from. Dropped here, so the tests see one width however they are started.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)
# pytest-xdist's workers share the cores: each gets its share of torch's (OpenMP's) threads,
# read when torch loads, before any test module imports it. A team per worker as wide as the
# machine oversubscribes it: on 2 cores with 2 workers, 2 threads each took a third longer.
_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
if _workers > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) // _workers)))

import pytest  # noqa: E402


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items) -> None:
    """The `gpu` and `hopper` marks (pyproject.toml): a Hopper test is a GPU test too, so that
    `-m gpu` selects it, and both are skipped where tests/gpu.py says they cannot run.
    tryfirst: the added marks must be there before `-m` selects."""
    from tests.gpu import GPU_FLOOR, why_not

    for item in items:
        hopper = item.get_closest_marker("hopper")
        gpu = item.get_closest_marker("gpu")
        if hopper is None and gpu is None:
            continue
        if gpu is None:
            item.add_marker("gpu")
        reason = why_not(None if hopper else gpu.kwargs.get("capability", GPU_FLOOR))
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


_modules_when_frozen = 0


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    """The pipeline calls gc.collect() between models (pipeline/measure.py `recover`), and a
    full collection walks every tracked object: with torch, Dynamo, triton and the test modules
    imported, a third of a second per `run_suite`. The objects of imported modules live all
    session, so once the imports have grown they are frozen out of later collections (after a
    collection, so no garbage is frozen; tests still collect everything made since)."""
    global _modules_when_frozen
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") == "1":
        from tests.interpreter_patching import install

        install()
    if len(sys.modules) >= _modules_when_frozen + 50:
        gc.collect()
        gc.freeze()
        _modules_when_frozen = len(sys.modules)
