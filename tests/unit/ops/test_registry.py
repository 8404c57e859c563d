"""The op registry finds the built-in ops in their own files, and what an op says about itself
(its engine names) reaches the match stage: nothing else needs editing to add an op."""

from __future__ import annotations

from pathlib import Path

import pytest

from opbench import vocabulary
from opbench.match.names import families_agree, op_family
from opbench.ops import registry
from opbench.ops.base import Op
from opbench.vocabulary import BUILTIN

OPS_DIR = Path(registry.__file__).parent


def test_every_op_file_is_found_in_the_documented_order() -> None:
    classes = registry.builtin_op_classes()
    builtin = [name for name in registry.OPS if vocabulary.op_origin(name) == BUILTIN]
    assert builtin == [cls.name for cls in classes]
    modules = [cls.__module__.rsplit(".", 1)[1] for cls in classes]
    assert modules == sorted(modules)  # by file name; a file's ops as written
    helpers = {"__init__", "attention_onnx", "base", "functional", "inputs", "kinds", "onnx_reading",
               "params", "quant", "registry"}  # fmt: skip
    assert set(modules) == {p.stem for p in OPS_DIR.glob("*.py")} - helpers
    assert builtin.index("maxpool2d") < builtin.index("avgpool2d")  # pool.py's order


def test_engine_names_come_from_the_ops() -> None:
    assert op_family("FusedGemm") == "linear" and op_family("aten::addmm") == "linear"
    assert op_family("SkipSimplifiedLayerNormalization") == "rmsnorm"
    assert op_family("Transpose") == "transpose" and families_agree("transpose", "permute")
    assert op_family("Pooling") == "pool" and families_agree("pool", "avgpool2d")
    assert op_family("NoSuchKernel") is None and op_family("") is None
    for name, op in registry.OPS.items():
        for engine in op.engine_names.split():
            assert op_family(engine.upper()) == name, engine


class _Softplus(Op):
    name = "softplus_for_test"
    engine_names = "Softplus aten::softplus"


@pytest.fixture
def restored():
    ops, words = registry.snapshot(), vocabulary.snapshot()
    yield
    registry.restore(ops)
    vocabulary.restore(words)


def test_an_op_registered_later_is_matched_by_its_engine_names(restored) -> None:
    assert op_family("softplus") is None
    registry.register_op(_Softplus(), "test")
    assert op_family("SOFTPLUS") == "softplus_for_test"
    assert families_agree(op_family("aten::softplus"), "softplus_for_test")
    registry.restore({k: v for k, v in registry.OPS.items() if k != "softplus_for_test"})
    assert op_family("softplus") is None  # the map follows the registry back
