"""suites/llama_quant.yaml (the LLaMA-7B prefill block in bfloat16 with fp8 and int8 W8A8
linears), shrunk to odd sizes by suites/networks.py's own builders, through `opbench run` on
the CPU (Triton in the interpreter): the triton backend plans the intended fused groups on the
shipped suite and on the tiny one alike; every fused group's result matches the float64
reference of the unquantized chain it covers, at the quantized linear's default tolerance;
every row of the run is checked, or `unsupported` with its reason (the peers' whole-model rows,
CUDA graphs on the CPU); and the whole models pass their end-to-end check.

torch.compile's Inductor is replaced by Dynamo's captured graph run as it is (as in
tests/cli/test_run_backends_cli.py): compiling C++ for every layer on the CPU would take
minutes and measure nothing the check needs; the compiled path is still Dynamo's."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from opbench.backends.torch_compile import TorchCompile
from opbench.backends.torch_int8 import TorchInt8
from opbench.cli.main import app
from opbench.report.run_table import run_columns
from opbench.results.io import read_run
from opbench.results.model import Status
from opbench.spec.load import load_suite, load_suite_text
from opbench.spec.model import QUANT_TOLERANCE
from tests.unit.test_fp8_groups import groups_by_name

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0")

SUITES = Path(__file__).parents[2] / "suites"
spec = importlib.util.spec_from_file_location("networks", SUITES / "networks.py")
networks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(networks)

# What the triton backend runs as one kernel each (backends/triton_fusion.py). The int8 model
# gets no SwiGLU GEMM: that kernel is for decode, up to 64 rows (the tiny suite has 67); above
# them its norms and silu·mul write the int8 codes, as the fp8 model's do.
GROUPS = {
    "llama7b_prefill_fp8": {
        "attn_norm+qkv": "norm_fp8",  # the norm writes qkv's e4m3 codes and row scales
        "o_proj+attn_res": "linear_add",  # the residual in the fp8 GEMM's epilogue
        "ffn_norm+gate+up": "norm_fp8",  # codes written once, read by gate and up
        "gate_act+swiglu+down+ffn_res": "glu_fp8",  # silu·mul quantized for down, + residual
    },
    "llama7b_prefill_fp8_linears": {},  # fuse: false
    "llama7b_prefill_int8": {
        "attn_norm+qkv": "norm_int8",  # the norm writes qkv's int8 codes and row scales
        "o_proj+attn_res": "linear_add",
        "ffn_norm+gate+up": "norm_int8",
        "gate_act+swiglu+down+ffn_res": "glu_int8",
    },
}
QUANT = {"llama7b_prefill_fp8": "fp8", "llama7b_prefill_fp8_linears": "fp8",
         "llama7b_prefill_int8": "int8"}  # fmt: skip
PEER = {"fp8": "torch-fp8", "int8": "torch-int8"}
LINEARS = ("qkv", "o_proj", "gate", "up", "down")


def tiny_suite() -> str:
    """The shipped suite's models at 67 tokens, hidden 32 (2 heads of 16), SwiGLU 48: K and N
    multiples of 16, as torch._scaled_mm needs on a GPU."""
    defaults = {"dtype": "bfloat16", "backends": ["torch", "torch-compile", "triton"],
                "timing": {"warmup_ms": 0, "rep_ms": 1, "rounds": 1}}  # fmt: skip
    models = networks.llama_quant_models(tokens=67, hidden=32, heads=2, ffn=48)
    return networks.suite_text("tiny", "tiny_llama_quant", "tiny", defaults, models)


def test_the_shipped_and_the_tiny_suite_plan_the_intended_groups() -> None:
    for suite in (load_suite(SUITES / "llama_quant.yaml"), load_suite_text(tiny_suite(), "t")):
        assert {m.name: groups_by_name(m) for m in suite.models} == GROUPS, suite.name
        for model in suite.models:
            assert model.layers[0].dtype == "bfloat16"
            quant = {layer.name: layer.quant for layer in model.layers if layer.op == "linear"}
            assert quant == dict.fromkeys(LINEARS, QUANT[model.name]), model.name
            for layer in model.layers:  # the peer on the quantized linears, nowhere else
                has_peer = PEER[QUANT[model.name]] in layer.backends
                assert has_peer == (layer.name in LINEARS), (model.name, layer.name)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("llama_quant")
    (tmp / "tiny_llama_quant.yaml").write_text(tiny_suite())
    with pytest.MonkeyPatch.context() as patch:
        for backend in (TorchCompile, TorchInt8):
            patch.setattr(backend, "compiler", staticmethod(lambda gm, inputs: gm.forward))
        result = CliRunner().invoke(app, ["run", str(tmp / "tiny_llama_quant.yaml"),
                                          "--device", "cpu", "--quick", "--out", str(tmp)])  # fmt: skip
    assert result.exit_code == 0, result.output
    (run_dir,) = [p for p in (tmp / "tiny_llama_quant").iterdir()
                  if p.is_dir() and not p.is_symlink()]  # fmt: skip
    return read_run(run_dir / "run.json")


def test_every_row_is_checked_or_says_why_not(run) -> None:
    assert run.complete and len(run.layers) == run.planned
    for r in run.layers:
        assert r.status == Status.OK and r.correct, (r.model, r.members, r.backend, r.message)
    suite = load_suite_text(tiny_suite(), "t")
    for model in suite.models:
        for backend in ("torch", "torch-compile", "triton", PEER[QUANT[model.name]]):
            covered = [m for r in run.layers if (r.model, r.backend) == (model.name, backend)
                       for m in r.members]  # fmt: skip
            expected = [layer.name for layer in model.layers if backend in layer.backends]
            assert sorted(covered) == sorted(expected), (model.name, backend)
    whole = {(e.model, e.backend, e.mode): e for e in run.end_to_end}
    assert len(whole) == len(run.end_to_end) == 3 * 4 * 2
    for (model, backend, mode), e in whole.items():
        if backend == PEER[QUANT[model]]:
            # Only the linears on the peer: no whole model, and no partial one under its name.
            assert e.status == Status.UNSUPPORTED, e
            assert e.message == "not every layer was built on this backend"
            assert e.stats is None and e.correctness is None
        elif mode == "cuda_graph":
            assert e.status == Status.UNSUPPORTED and e.message == "no CUDA graphs on the CPU"
        else:
            assert e.status == Status.OK and e.correct, (model, backend, e.message, e.correctness)
            assert set(e.outputs) == {"ffn_res"}


def test_each_fused_group_matches_the_chain_it_covers(run) -> None:
    for model, groups in GROUPS.items():
        quant = QUANT[model]
        rows = {"+".join(r.members): r for r in run.layers
                if r.model == model and r.backend == "triton"}  # fmt: skip
        assert {name for name, r in rows.items() if len(r.members) > 1} == set(groups), model
        for name in groups:
            c = rows[name].correctness
            # The float64 reference of the unquantized layers the group covers, at the
            # quantized linear's own default: never loosened, and named.
            assert c.passed and c.tolerance == QUANT_TOLERANCE[quant], (model, name, c)
            assert not c.loose_tolerance and c.tolerance_of in LINEARS, (model, name, c)
            assert c.reference == "float64-cpu" and c.unwritten == 0, (model, name, c)
            if quant == "fp8":
                assert c.rel_l2 > 1e-2, (model, name, c)  # e4m3's rounding is in it


def test_each_unfused_fp8_linear_beside_its_peer(run) -> None:
    """llama7b_prefill_fp8_linears: the linears one by one on triton and torch-fp8, both
    checked at fp8's tolerance: the rows a linear-for-linear comparison reads."""
    for backend in ("triton", "torch-fp8"):
        rows = {r.members: r for r in run.layers
                if r.model == "llama7b_prefill_fp8_linears" and r.backend == backend
                and r.members[0] in LINEARS}  # fmt: skip
        assert set(rows) == {(name,) for name in LINEARS}, backend
        for row in rows.values():
            c = row.correctness
            assert c.passed and c.tolerance == QUANT_TOLERANCE["fp8"] and c.rel_l2 > 1e-2, row


def test_the_run_table_sets_lone_linears_against_their_peer_and_no_fused_group(run) -> None:
    """× torch-fp8 / × torch-int8 on the real rows. Interpreter times are no measurements (the
    table leaves them out), so the flag is dropped here only to reach the arithmetic: a lone
    quantized linear gets a ratio over its quant's peer; a fused group none, as the peer ran
    its linear alone, not the norm, activation or add fused with it."""
    measured = replace(run, layers=tuple(replace(r, interpreted=False) for r in run.layers))
    columns = {str(c.header): [t.plain for t in c.cells] for c in run_columns(measured)}
    lone = 0
    for i, r in enumerate(measured.layers):
        if r.backend != "triton":
            continue
        own, other = PEER[QUANT[r.model]], PEER["int8" if QUANT[r.model] == "fp8" else "fp8"]
        assert columns[f"× {other}"][i] == "—", (r.model, r.members)
        lone_linear = len(r.members) == 1 and r.members[0] in LINEARS
        assert (columns[f"× {own}"][i] != "—") == lone_linear, (r.model, r.members)
        lone += lone_linear
    assert lone == len(LINEARS)  # the unfused fp8 model's five (int8's are fused, as fp8's)
