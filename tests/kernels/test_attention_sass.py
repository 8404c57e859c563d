"""The attention kernels compile for sm_90 to the SASS they compiled to before their helpers took
named structures (attention_parts.py, attention_ws_parts.py): one configuration of each kernel,
compiled on the CPU by Triton's ptxas and compared with attention_sass.json's digests (SASS
instruction for instruction, registers, stack, shared memory). The whole set:
`python3 tests/kernels/attention_sass.py dump|compare` (its docstring)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import triton

from tests.kernels.sm90 import run_uninterpreted

# Not imported from attention_sass.py: importing it turns the interpreter off.
RECORDED = json.loads(Path(__file__).with_name("attention_sass.json").read_text())

# In the uninterpreted process: the configuration's SASS digest and its resource line.
SASS_DIGEST = """
import sys
from tests.kernels.attention_sass import digest, sass_of
text = sass_of(sys.argv[1])
print(digest(text), text.splitlines()[0])
"""


@pytest.mark.skipif(
    triton.__version__ != RECORDED["triton"],
    reason=f"digests recorded with Triton {RECORDED['triton']}; another release compiles "
    "differently",
)
@pytest.mark.parametrize(
    "name",
    [
        "fwd_float16_d128_c1_desc1_lazy1",
        "decode_float16_d64_c0_mask1_split0",
        "int8_d128_c1_desc1_lazy1",
        "fp8_d128_c0_desc0",
        "ws_fp16_d128_c1_s3ppr",
        "ws_int8_d128_c0_s3r",
    ],
)
def test_sm90_sass_is_unchanged(name: str) -> None:
    found, resources = run_uninterpreted(SASS_DIGEST, name).strip().splitlines()[-1].split(" ", 1)
    assert found == RECORDED["sass"][name], f"{name}: SASS changed ({resources})"
