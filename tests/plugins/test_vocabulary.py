"""opbench/vocabulary.py owns the backend and op names: built-in names without importing a backend,
and one registration path that built-ins and plugins both take."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from opbench import vocabulary
from opbench.backends import registry as backends
from opbench.ops import registry as ops

REPO = Path(__file__).resolve().parents[2]


def test_loading_a_suite_imports_no_backend_torch_or_triton() -> None:
    code = (
        "import sys\n"
        "from opbench.spec.load import load_suite\n"
        "load_suite('tests/data/suites/tiny.yaml')\n"
        "bad = [m for m in sys.modules if m.startswith(('opbench.backends', 'torch', 'triton'))]\n"
        "print(bad)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True, env=env
    )
    assert done.stdout.strip() == "[]"


def test_builtin_backends_register_under_the_spec_names() -> None:
    builtins = vocabulary.BUILTIN_BACKENDS
    assert backends.backend_names()[: len(builtins)] == builtins
    for name in vocabulary.BUILTIN_BACKENDS:
        assert vocabulary.backend_origin(name) == vocabulary.BUILTIN
        assert backends.get_backend(name).name == name
    assert backends.runs_triton("triton") and not backends.runs_triton("torch")


def test_builtin_ops_took_the_same_path() -> None:
    assert ops.OPS and all(vocabulary.op_origin(name) == vocabulary.BUILTIN for name in ops.OPS)


def test_a_plugin_name_is_claimed_once() -> None:
    backends.register_backend("mine", lambda: None, "/x/mine.py")
    assert backends.backend_names()[-1] == "mine"
    assert vocabulary.backend_origin("mine") == "/x/mine.py"
    with pytest.raises(vocabulary.NameClash, match="already registered by /x/mine.py"):
        backends.register_backend("mine", lambda: None, "/y/other.py")
    with pytest.raises(vocabulary.NameClash, match="would shadow the built-in backend"):
        backends.register_backend("torch-compile", lambda: None, "/y/other.py")
