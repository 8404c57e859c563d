"""The attention kernels' sm_90 SASS, compiled on the CPU, to show that a change to the kernels'
source (helpers taking named structures instead of positional values, say) leaves the compiled
code as it was. Each configuration is compiled with Triton's own ptxas (no GPU needed); its
SASS (`cuobjdump --dump-sass`) and resource usage (registers, spill bytes) go to one file.

    # in each tree (the tree's opbench is the one imported, by PYTHONPATH):
    PYTHONPATH=. python3 tests/kernels/attention_sass.py dump /tmp/sass_before
    PYTHONPATH=. python3 tests/kernels/attention_sass.py dump /tmp/sass_after
    python3 tests/kernels/attention_sass.py compare /tmp/sass_before /tmp/sass_after

`dump DIR NAME...` compiles only the named configurations; `list` names them all.
tests/kernels/test_attention_sass.py compiles a few and compares them with the digests in
attention_sass.json, written from a dump by `digests DIR` (main's tree before the change; a
change meant to alter the compiled code rewrites them from its own dump).
"""

from __future__ import annotations

import os

# Compile (the tests' interpreter cannot): a script, or a module of sm90.run_uninterpreted's
# process; never imported by the interpreted test process.
os.environ["TRITON_INTERPRET"] = "0"

import hashlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import triton  # noqa: E402
from triton._C.libtriton import native_specialize_impl  # noqa: E402
from triton.backends.compiler import BaseBackend, GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
LOG2E = 1.4426950408889634
F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32


def specialized(fn, values: tuple, const: dict, **options) -> tuple[ASTSource, dict]:
    """fn's source with the signature and divisibility its launcher gives these leading
    positional values (Triton's own specialization: 16-divisible pointers and integers,
    integers equal to 1 and None as constexprs), and the compile options."""
    args = dict(zip(fn.arg_names, values, strict=False))
    signature, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in const:
            signature[name] = "constexpr"
            continue
        kind, key = native_specialize_impl(BaseBackend, args[name], False, True, True)
        signature[name] = kind
        if kind == "constexpr":
            const[name] = key
        elif key == "D":
            attrs[(i,)] = [["tt.divisibility", 16]]
    return ASTSource(fn, signature, const, attrs), options


def _heads(batch, seq, heads, dim, dtype):
    """q, k, v as [B, S, H, D] views of one packed [B, S, 3, H, D] input, and the output."""
    x = torch.empty(batch, seq, 3, heads, dim, dtype=dtype)
    return x[:, :, 0], x[:, :, 1], x[:, :, 2], torch.empty(batch, seq, heads, dim, dtype=dtype)


def portable(dtype, dim, causal, desc, lazy, block_m=128, block_n=64, warps=8, stages=3):
    from opbench.kernels.attention.attention import _attention_fwd_kernel as fn

    q, k, v, out = _heads(2, 256, 2, dim, dtype)
    values = (q, k, v, out, 256, 2, *q.stride(), *out.stride(), LOG2E / math.sqrt(dim))
    const = dict(HEAD_DIM=dim, CAUSAL=causal, DOT_PRECISION="ieee" if dtype == F32 else "tf32",
                 UPCAST_DOT=False, BLOCK_M=block_m, BLOCK_N=block_n, USE_DESC=desc,
                 LAZY=lazy)  # fmt: skip
    return specialized(fn, values, const, num_warps=warps, num_stages=stages)


def decode(dtype, dim, causal, mask, split, group=4, block_n=64):
    from opbench.kernels.attention.attention_decode import _decode_split_kernel as fn

    q = torch.empty(2, 8, 8, dim, dtype=dtype)
    k = torch.empty(2, 512, 8 // group, dim, dtype=dtype)
    keys = torch.empty(2, 512, dtype=torch.int32)
    ws = torch.empty(64, dtype=F32)
    values = (q, k, k, q, ws, ws, ws, keys if mask else q, 8, 512, 8 // group, 8 * group, 256,
              *q.stride(), *k.stride(), *k.stride(), *q.stride(), 512 if mask else 0,
              LOG2E / math.sqrt(dim))  # fmt: skip
    const = dict(HEAD_DIM=dim, GROUP=group, CAUSAL=causal, HAS_MASK=mask, SPLIT=split,
                 DOT_PRECISION="ieee" if dtype == F32 else "tf32", UPCAST_DOT=False,
                 BLOCK_M=32, BLOCK_N=block_n)  # fmt: skip
    return specialized(fn, values, const, num_warps=4, num_stages=3)


def int8(dim, causal, desc, lazy, block_m=128, block_n=64, warps=8, stages=3):
    from opbench.kernels.attention.attention_int8 import _attention_int8_kernel as fn

    q, _, v, out = _heads(2, 256, 2, dim, F16)
    k8 = torch.empty(4, 256, dim, dtype=torch.int8)
    k_scale = torch.empty(4, 2, dtype=F32)
    values = (q, k8, k_scale, v, out, 256, 256, 2, *q.stride(), *out.stride(),
              LOG2E / math.sqrt(dim))  # fmt: skip
    const = dict(HEAD_DIM=dim, CAUSAL=causal, UPCAST_DOT=False, BLOCK_M=block_m, KEY_BLOCK=128,
                 BLOCK_N=block_n, USE_DESC=desc, LAZY=lazy)  # fmt: skip
    return specialized(fn, values, const, num_warps=warps, num_stages=stages)


def fp8(dim, causal, desc, block_m=128, block_n=64, warps=8, stages=3):
    from opbench.kernels.attention.attention_fp8 import _attention_fp8_kernel as fn

    q, _, _, out = _heads(2, 256, 2, dim, F16)
    k8 = torch.empty(4, 256, dim, dtype=torch.float8_e4m3fn)
    vt8 = torch.empty(4, dim, 256, dtype=torch.float8_e4m3fn)
    values = (q, k8, torch.empty(4, 2), vt8, torch.empty(4, dim), out, 256, 256, 2, *q.stride(),
              *out.stride(), LOG2E / math.sqrt(dim))  # fmt: skip
    const = dict(HEAD_DIM=dim, CAUSAL=causal, EMULATE=False, BLOCK_M=block_m, KEY_BLOCK=128,
                 BLOCK_N=block_n, USE_DESC=desc)  # fmt: skip
    return specialized(fn, values, const, num_warps=warps, num_stages=stages)


def warp_specialized(quant, dim, causal, stages, pingpong, p_regs, block_n=128):
    """The Gluon kernel as tests/kernels/test_attention_ws.py compiles it."""
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    from opbench.kernels.attention.attention_ws import ws_args
    from opbench.kernels.attention.attention_ws_kernel import _attention_ws_kernel as fn
    from opbench.kernels.attention.attention_ws_step import MAXNREG

    q, k, v, out = _heads(2, 256, 2, dim, F16)
    if quant == "fp8":
        e4m3 = torch.float8_e4m3fn
        quantized = [torch.empty(4, 256, dim, dtype=e4m3), torch.empty(4, 2),
                     torch.empty(4, dim, 256, dtype=e4m3), torch.empty(4, dim)]  # fmt: skip
    elif quant == "int8":
        quantized = [torch.empty(4, 256, dim, dtype=torch.int8), torch.empty(4, 2)]
    else:
        quantized = []
    args = ws_args(q, k, v, out, quant, quantized, block_n)
    signature = {name: mangle_type(arg) for name, arg in zip(fn.arg_names, args, strict=False)}
    const = {name: arg for name, arg in zip(fn.arg_names, args, strict=False) if arg is None}
    const.update(HEAD_DIM=dim, CAUSAL=causal, BLOCK_N=block_n, STAGES=stages, PINGPONG=pingpong,
                 P_REGS=p_regs, QUANT=("fp16", "fp8", "int8").index(quant))  # fmt: skip
    signature.update(dict.fromkeys(const, "constexpr"))
    options = dict(num_warps=4, num_stages=1, maxnreg=MAXNREG)
    return GluonASTSource(fn, signature, const), options


# Each kernel that calls the family's helpers, over its dtypes, head dims, masks and code
# paths (descriptors, lazy rescaling, split, P in registers, ping-pong).
PORTABLE = [  # dtype, head dim, causal, descriptors, lazy rescaling
    (F16, 128, True, True, True), (F16, 128, False, False, False), (BF16, 64, True, False, True),
    (F16, 64, False, True, False), (F32, 64, True, False, False),
]  # fmt: skip
DECODE = [  # dtype, head dim, causal, key mask, split
    (F16, 128, True, False, True), (F16, 64, False, True, False), (F32, 64, True, True, True),
]  # fmt: skip
INT8 = [(128, True, True, True), (128, False, False, False), (64, True, False, True)]
FP8 = [(128, True, True), (128, False, False), (64, True, False)]
WARP_SPECIALIZED = [  # format, head dim, causal, stages, ping-pong, P in registers
    ("fp16", 128, False, 2, True, False), ("fp16", 128, True, 2, False, False),
    ("fp16", 128, True, 3, True, True), ("fp16", 64, True, 5, False, True),
    ("fp8", 128, True, 3, True, False), ("fp8", 128, False, 3, False, False),
    ("fp8", 64, True, 4, True, False), ("int8", 128, True, 2, True, False),
    ("int8", 128, False, 3, False, True), ("int8", 64, True, 4, True, True),
]  # fmt: skip


def _configs() -> dict:
    """name -> (builder, its arguments)."""
    c = {}
    for dt, dim, causal, desc, lazy in PORTABLE:
        name = f"fwd_{str(dt)[6:]}_d{dim}_c{causal:d}_desc{desc:d}_lazy{lazy:d}"
        c[name] = (portable, (dt, dim, causal, desc, lazy))
    for dt, dim, causal, mask, split in DECODE:
        name = f"decode_{str(dt)[6:]}_d{dim}_c{causal:d}_mask{mask:d}_split{split:d}"
        c[name] = (decode, (dt, dim, causal, mask, split))
    for dim, causal, desc, lazy in INT8:
        c[f"int8_d{dim}_c{causal:d}_desc{desc:d}_lazy{lazy:d}"] = (int8, (dim, causal, desc, lazy))
    for dim, causal, desc in FP8:
        c[f"fp8_d{dim}_c{causal:d}_desc{desc:d}"] = (fp8, (dim, causal, desc))
    for quant, dim, causal, stages, pp, regs in WARP_SPECIALIZED:
        tile = f"s{stages}{'pp' if pp else ''}{'r' if regs else ''}"
        c[f"ws_{quant}_d{dim}_c{causal:d}_{tile}"] = (
            warp_specialized, (quant, dim, causal, stages, pp, regs))  # fmt: skip
    return c


def sass_of(name: str) -> str:
    """The configuration's resource usage line and SASS (file names and paths left out)."""
    build, params = _configs()[name]
    source, options = build(*params)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        usage = subprocess.run([BIN / "cuobjdump", "--dump-resource-usage", cubin],
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
        sass = subprocess.run([BIN / "cuobjdump", "--dump-sass", cubin], capture_output=True,
                              text=True, check=True).stdout  # fmt: skip
    resources = " ".join(re.findall(r"(REG:\d+|STACK:\d+|SHARED:\d+|LOCAL:\d+)", usage))
    lines = [line for line in sass.splitlines() if "/*" in line and "*/" in line]
    return f"{resources} dynamic_shared:{compiled.metadata.shared}\n" + "\n".join(lines) + "\n"


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def dump(out_dir: Path, names: list[str]) -> None:
    import opbench

    print("kernels of", Path(opbench.__file__).parent)  # the tree PYTHONPATH picked
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in names or list(_configs()):
        text = sass_of(name)
        (out_dir / f"{name}.sass").write_text(text)
        print(name, text.splitlines()[0], f"{len(text.splitlines()) - 1} lines", digest(text))


def compare(before: Path, after: Path) -> int:
    """Each configuration's SASS and resources, before and after; 1 if any differs."""
    names = sorted({p.stem for p in before.glob("*.sass")} & {p.stem for p in after.glob("*.sass")})
    differ = [n for n in names if (before / f"{n}.sass").read_text()
              != (after / f"{n}.sass").read_text()]  # fmt: skip
    for name in names:
        head = (after / f"{name}.sass").read_text().splitlines()[0]
        print(f"{name:40s} {'DIFFERS' if name in differ else 'same'}  {head}")
    print(f"{len(names) - len(differ)} of {len(names)} configurations compile to identical SASS")
    return 1 if differ else 0


DIGESTS = Path(__file__).with_name("attention_sass.json")


def write_digests(dump_dir: Path) -> None:
    """attention_sass.json: each dumped configuration's digest, and the Triton that compiled."""
    digests = {p.stem: digest(p.read_text()) for p in sorted(dump_dir.glob("*.sass"))}
    DIGESTS.write_text(json.dumps({"triton": triton.__version__, "sass": digests}, indent=1) + "\n")


if __name__ == "__main__":
    command, *rest = sys.argv[1:] or ["list"]
    if command == "list":
        print("\n".join(_configs()))
    elif command == "dump":
        dump(Path(rest[0]), rest[1:])
    elif command == "digests":
        write_digests(Path(rest[0]))
    elif command == "compare":
        sys.exit(compare(Path(rest[0]), Path(rest[1])))
