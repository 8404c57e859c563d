"""tests/kernels/gemm_sass.py, the GEMM family's before/after SASS comparison, stays usable:
every configuration still binds to its kernel's signature, and one compiles to a SASS dump
that compares equal to itself (the comparison of two trees is the script's, run by hand)."""

from __future__ import annotations

from pathlib import Path

from tests.kernels.sm90 import run_uninterpreted

# In the uninterpreted process: importing gemm_sass turns the interpreter off for its process.
BIND_DUMP_COMPARE = """
import sys
from pathlib import Path
from tests.kernels import gemm_sass
configs = gemm_sass._configs()
for name, (build, params) in configs.items():
    build(*params)  # binds the arguments as the launcher would; no compile
out = Path(sys.argv[1])
gemm_sass.dump(out, [sys.argv[2]])
text = (out / (sys.argv[2] + ".sass")).read_text()
print("configs", len(configs), "instructions", gemm_sass.instructions(text),
      "compare", gemm_sass.compare(out, out))
"""


def test_every_configuration_binds_and_one_dumps(tmp_path: Path) -> None:
    out = run_uninterpreted(BIND_DUMP_COMPARE, tmp_path, "split_k_f16_split1_res")
    words = out.split()
    counts = dict(zip(words[-6::2], map(int, words[-5::2]), strict=True))
    assert counts["configs"] >= 20 and counts["instructions"] > 100, out
    assert counts["compare"] == 0, out  # a dump equals itself
    resources, *sass = (tmp_path / "split_k_f16_split1_res.sass").read_text().splitlines()
    assert resources.startswith("REG:") and "STACK:0" in resources, resources
    assert any("HMMA" in line for line in sass) and any("EXIT" in line for line in sass)
