"""The GEMM family's sm_90 SASS, compiled on the CPU, to show that a change to the kernels' source
(helpers taking named structures instead of positional values, say) leaves the compiled code as
it was. Each configuration is one kernel that ends through the family's epilogue helpers, bound
as its launcher binds it (Triton's own specialization of the arguments: 16-divisible pointers
and integers), compiled with Triton's own ptxas (no GPU needed); its SASS (`cuobjdump
--dump-sass`, instructions only) and resource usage (registers, stack, local and shared memory)
go to one file per configuration.

    # in each tree (the tree's opbench is the one imported, by PYTHONPATH):
    PYTHONPATH=. python3 tests/kernels/gemm_sass.py dump /tmp/gemm_sass_before
    PYTHONPATH=. python3 tests/kernels/gemm_sass.py dump /tmp/gemm_sass_after
    python3 tests/kernels/gemm_sass.py compare /tmp/gemm_sass_before /tmp/gemm_sass_after

`dump DIR NAME...` compiles only the named configurations; `list` names them all.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "0"  # compile; the tests' interpreter cannot

import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource, make_backend  # noqa: E402
from triton.runtime.jit import create_function_from_signature  # noqa: E402

BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
TARGET = GPUTarget("cuda", 90, 32)
F16, BF16, F32, I8 = torch.float16, torch.bfloat16, torch.float32, torch.int8
E4M3, U8 = torch.float8_e4m3fn, torch.uint8
NO_ROPE = dict(rope_seq=1, rope_offset=0, rope_rotated=0, rope_freq=0.0, ROPE=0, ROPE_D=2)
ROPE = {1: dict(rope_seq=96, rope_offset=3, rope_rotated=512, rope_freq=-0.2, ROPE=1, ROPE_D=128),
        2: dict(rope_seq=96, rope_offset=0, rope_rotated=256, rope_freq=-0.2, ROPE=2, ROPE_D=64)}  # fmt: skip
M, N, K = 1000, 776, 1040  # odd sizes: every mask is live


def source(fn, values: dict, options: dict):
    """fn bound to `values` (every parameter by name) as its launcher binds them: the
    signature, constexprs and divisibility Triton's own binder derives; and the options."""
    backend = make_backend(TARGET)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, specialization, opts = binder(**values, **options)
    opts, signature, constexprs, attrs = fn._pack_args(backend, options, bound, specialization,
                                                       opts)  # fmt: skip
    if "gluon" in type(fn).__module__:
        from triton.experimental.gluon._runtime import GluonASTSource

        return GluonASTSource(fn, signature, constexprs, attrs), opts.__dict__
    return ASTSource(fn, signature, constexprs, attrs), opts.__dict__


def _epilogue(dtype, bias, act, residual, rope):
    """The pointer kernels' epilogue arguments: out, bias, scales, residual; flags; RoPE."""
    out = torch.empty(M, N, dtype=F16 if dtype in (I8, E4M3) else dtype)
    vec_n, vec_m = torch.empty(N), torch.empty(M)
    pointers = dict(out_ptr=out, bias_ptr=vec_n, row_scale_ptr=vec_m, col_scale_ptr=vec_n,
                    res_ptr=out)  # fmt: skip
    flags = dict(IS_INT8=dtype == I8, SCALED=dtype in (I8, E4M3), HAS_BIAS=bias, ACTIVATION=act,
                 HAS_RESIDUAL=residual, DOT_PRECISION="ieee", UPCAST=False)  # fmt: skip
    return out, pointers, flags, ROPE[rope] if rope else NO_ROPE


def tiled(dtype, bias, act, residual, rope, block=(128, 128, 64), warps=8, stages=3):
    from opbench.kernels.gemm.linear_kernels import _linear_tiled_kernel as fn

    a, w = torch.empty(M, K, dtype=dtype), torch.empty(N, K, dtype=dtype)
    out, pointers, flags, rope_args = _epilogue(dtype, bias, act, residual, rope)
    values = dict(a_ptr=a, w_ptr=w, **pointers, M=M, N=N, K=K, stride_am=K, stride_ak=1,
                  stride_wn=K, stride_wk=1, stride_om=N, stride_on=1, BLOCK_M=block[0],
                  BLOCK_N=block[1], BLOCK_K=block[2], GROUP_M=8, EVEN_K=K % block[2] == 0,
                  **flags, **rope_args)  # fmt: skip
    return source(fn, values, dict(num_warps=warps, num_stages=stages))


def tma(dtype, bias, act, residual, rope, specialize=False, block=(128, 128, 64)):
    from triton.tools.tensor_descriptor import TensorDescriptor

    from opbench.kernels.gemm.linear_kernels import _linear_tma_kernel as fn

    a, w = torch.empty(M, K, dtype=dtype), torch.empty(N, K, dtype=dtype)
    out, pointers, flags, rope_args = _epilogue(dtype, bias, act, residual, rope)
    bm, bn, bk = block
    a_desc = TensorDescriptor(a, [M, K], [K, 1], [bm, bk])
    w_desc = TensorDescriptor(w, [N, K], [K, 1], [bn, bk])
    values = dict(a_desc=a_desc, w_desc=w_desc, **pointers, M=M, N=N, K=K, stride_om=N,
                  stride_on=1, NUM_PROGRAMS=132, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                  **flags, WARP_SPECIALIZE=specialize, FLATTEN=not specialize, **rope_args)  # fmt: skip
    return source(fn, values, dict(num_warps=8, num_stages=3))


def split_k(dtype, bias, act, residual, rope, split, quantize=False, block=(16, 64, 128)):
    from opbench.kernels.gemm.linear_kernels import _linear_split_k_kernel as fn

    a = torch.empty(M, K, dtype=F16 if quantize else dtype)
    w = torch.empty(N, K, dtype=dtype)
    out, pointers, flags, rope_args = _epilogue(dtype, bias, act, residual, rope)
    acc = torch.empty(split * M * N, dtype=torch.int32 if dtype == I8 else F32)
    values = dict(a_ptr=a, w_ptr=w, **pointers, partial_ptr=acc,
                  arrivals_ptr=torch.empty(1024, dtype=torch.int32), M=M, N=N, K=K,
                  stride_am=K, stride_ak=1, stride_wn=K, stride_wk=1, stride_om=N, stride_on=1,
                  BLOCK_M=block[0], BLOCK_N=block[1], BLOCK_K=block[2], SPLIT_K=split,
                  EVEN_K=K % block[2] == 0, QUANTIZE_A=quantize, QUANT_BLOCK_K=128,
                  **flags, **rope_args)  # fmt: skip
    return source(fn, values, dict(num_warps=4, num_stages=4))


def _stream_args(x_dtype, bits, bias, split, block_k, group=128):
    """The weight streams' arguments: K a multiple of int4's groups, else odd."""
    k = 1024 if bits == 4 else K
    w = {16: torch.empty(N, k, dtype=x_dtype), 8: torch.empty(N, k, dtype=I8),
         4: torch.empty(N, k // 2, dtype=U8)}[bits]  # fmt: skip
    scales = torch.empty(k // group, N) if bits == 4 else torch.empty(N)
    out = torch.empty(M, N, dtype=x_dtype)
    return dict(x_ptr=torch.empty(M, k, dtype=x_dtype), w_ptr=w, w_scale_ptr=scales,
                out_ptr=out, bias_ptr=torch.empty(N), partial_ptr=torch.empty(split * M * N),
                arrivals_ptr=torch.empty(1024, dtype=torch.int32), M=M, N=N, K=k, stride_xm=k,
                EVEN_K=k % block_k == 0,
                stride_wn=w.stride(0), stride_sg=N, stride_om=N, stride_on=1, SPLIT_K=split,
                W_BITS=bits, GROUP_SIZE=group, HAS_BIAS=bias, UPCAST=False)  # fmt: skip


def stream(x_dtype, bits, bias, act, rope, split, use_dot, block=(16, 64, 128)):
    from opbench.kernels.gemm.linear_stream import _linear_stream_kernel as fn

    values = dict(**_stream_args(x_dtype, bits, bias, split, block[2]),
                  BLOCK_M=block[0] if use_dot else 1, BLOCK_N=block[1], BLOCK_K=block[2],
                  USE_DOT=use_dot, FAST_UNPACK=bits != 16, ACTIVATION=act,
                  **(ROPE[rope] if rope else NO_ROPE))  # fmt: skip
    return source(fn, values, dict(num_warps=4, num_stages=4))


def weight_only(x_dtype, bits, bias, act, split, w_left, block=(16, 64, 128)):
    from opbench.kernels.gemm.linear_stream_q import _weight_only_kernel as fn

    values = dict(**_stream_args(x_dtype, bits, bias, split, block[2]), BLOCK_M=block[0],
                  BLOCK_N=block[1], BLOCK_K=block[2], W_LEFT=w_left, FAST=x_dtype == F16,
                  ASM=x_dtype == F16, ACTIVATION=act)  # fmt: skip
    return source(fn, values, dict(num_warps=4, num_stages=4))


def warp_specialized(dtype, tile, bias, act, residual, pingpong, rope=0, k_bytes=128):
    """The Gluon GEMM as its launcher (gemm_ws.ws_call) binds it."""
    from opbench.kernels.gemm.gemm_ws import MAXNREG, _descriptor, _gemm_ws_kernel

    wg_m, bn, stages, c_bufs = tile
    bk = k_bytes // dtype.itemsize
    a, w = torch.empty(M, K, dtype=dtype), torch.empty(N, K, dtype=dtype)
    out = torch.empty(M, N, dtype=BF16 if dtype == BF16 else F16)
    c = _descriptor(out, [wg_m, bn // 2])
    vec = torch.empty(N)
    values = dict(a_desc=_descriptor(a, [wg_m, bk]), w_desc=_descriptor(w, [bn, bk]), c_desc=c,
                  res_desc=c, bias_ptr=vec, row_scale_ptr=torch.empty(M), col_scale_ptr=vec,
                  M=M, N=N, K=K, num_programs=132, WG_M=wg_m, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                  STAGES=stages, C_BUFS=c_bufs, PINGPONG=pingpong, IS_INT8=dtype == I8,
                  SCALED=dtype.itemsize == 1, HAS_BIAS=bias, ACTIVATION=act,
                  HAS_RESIDUAL=residual,
                  **(dict(ROPE[1], ROPE_D=bn if rope == 1 else bn // 2) if rope else NO_ROPE))  # fmt: skip
    return source(_gemm_ws_kernel, values, dict(num_warps=4, num_stages=1, maxnreg=MAXNREG))


def _configs() -> dict:
    """name -> (builder, arguments): each kernel that ends through the family's epilogue
    helpers (epilogue_store, finish_tile; the Gluon GEMM's consumer and producer), over its
    operand dtypes and epilogue paths (bias, activation, residual, scales, RoPE, split-K)."""
    c = {}
    for name, dt, bias, act, res, rope in [
        ("f16_bias_silu_res", F16, True, 3, True, 0), ("bf16_plain", BF16, False, 0, False, 0),
        ("i8_scaled_gelu", I8, True, 4, False, 0), ("f16_rope_half", F16, True, 0, False, 1),
        ("bf16_rope_interleaved", BF16, False, 0, False, 2),
    ]:  # fmt: skip
        c[f"tiled_{name}"] = (tiled, (dt, bias, act, res, rope))
    for name, dt, bias, act, res, rope, ws in [
        ("f16_bias_silu_res", F16, True, 3, True, 0, False), ("e4m3_scaled", E4M3, True, 0, False, 0, False),
        ("bf16_rope_half", BF16, True, 0, False, 1, False), ("f16_warp_specialize", F16, True, 2, True, 0, True),
    ]:  # fmt: skip
        c[f"tma_{name}"] = (tma, (dt, bias, act, res, rope, ws))
    for name, dt, bias, act, res, rope, split, quant in [
        ("f16_split1_res", F16, True, 3, True, 0, 1, False), ("f16_split4_res", F16, True, 3, True, 0, 4, False),
        ("i8_split4_quantize", I8, True, 0, False, 0, 4, True), ("bf16_split2_rope_half", BF16, True, 0, False, 1, 2, False),
    ]:  # fmt: skip
        c[f"split_k_{name}"] = (split_k, (dt, bias, act, res, rope, split, quant))
    for name, dt, bits, bias, act, rope, split, dot in [
        ("f16_w16_split4_dot", F16, 16, True, 3, 0, 4, True), ("f16_w8_split1_gemv", F16, 8, True, 0, 0, 1, False),
        ("bf16_w4_split2_dot", BF16, 4, False, 2, 0, 2, True), ("f16_w16_rope_half", F16, 16, True, 0, 1, 1, True),
    ]:  # fmt: skip
        c[f"stream_{name}"] = (stream, (dt, bits, bias, act, rope, split, dot))
    for name, dt, bits, bias, act, split, left in [
        ("f16_w8_split4_left", F16, 8, True, 3, 4, True), ("bf16_w4_split1", BF16, 4, False, 0, 1, False),
    ]:  # fmt: skip
        c[f"weight_only_{name}"] = (weight_only, (dt, bits, bias, act, split, left))
    for name, dt, tile, bias, act, res, pp, rope in [
        ("f16_coop_res", F16, (64, 256, 3, 2), True, 3, True, False, 0),
        ("bf16_coop_one_buffer", BF16, (64, 256, 4, 1), False, 0, False, False, 0),
        ("e4m3_coop_res", E4M3, (64, 256, 3, 2), True, 6, True, False, 0),
        ("i8_coop", I8, (128, 128, 4, 1), True, 3, False, False, 0),
        ("f16_pingpong_res", F16, (64, 256, 4, 2), True, 3, True, True, 0),
        ("i8_pingpong_res", I8, (128, 128, 5, 2), True, 3, True, True, 0),
        ("bf16_pingpong_rope_one_head", BF16, (128, 128, 5, 2), True, 0, False, True, 1),
        ("bf16_coop_rope_two_heads", BF16, (64, 256, 3, 2), True, 0, False, False, 2),
    ]:  # fmt: skip
        c[f"ws_{name}"] = (warp_specialized, (dt, tile, bias, act, res, pp, rope))
    # int8 with 256 bytes of K per step (two TMA boxes per operand and step)
    c["ws_i8_pingpong_deep_k"] = (warp_specialized, (I8, (64, 128, 4, 2), True, 3, True, True,
                                                     0, 256))  # fmt: skip
    return c


def sass_of(name: str) -> str:
    """The configuration's resource usage line and SASS instructions (no file names)."""
    build, params = _configs()[name]
    src, options = build(*params)
    compiled = triton.compile(src, target=TARGET, options=options)
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        cubin.write_bytes(compiled.asm["cubin"])

        def dump(flag: str) -> str:
            return subprocess.run([BIN / "cuobjdump", flag, cubin], capture_output=True,
                                  text=True, check=True).stdout  # fmt: skip

        usage, sass = dump("--dump-resource-usage"), dump("--dump-sass")
    resources = " ".join(re.findall(r"(REG:\d+|STACK:\d+|SHARED:\d+|LOCAL:\d+)", usage))
    lines = [line.strip() for line in sass.splitlines() if "/*" in line and "*/" in line]
    return f"{resources} dynamic_shared:{compiled.metadata.shared}\n" + "\n".join(lines) + "\n"


def instructions(sass: str) -> int:
    """How many instructions a dump holds (each line with an address, /*0a50*/)."""
    return len(re.findall(r"/\*[0-9a-f]{4,}\*/", sass))


def dump(out_dir: Path, names: list[str]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in names or list(_configs()):
        text = sass_of(name)
        (out_dir / f"{name}.sass").write_text(text)
        print(f"{name:40s} {text.splitlines()[0]}  {instructions(text)} instructions", flush=True)


def compare(before: Path, after: Path) -> int:
    """Each configuration's SASS and resources, before and after; 1 if any differs."""
    names = sorted(p.stem for p in before.glob("*.sass"))
    differ = [n for n in names if (before / f"{n}.sass").read_text()
              != (after / f"{n}.sass").read_text()]  # fmt: skip
    for name in names:
        text = (after / f"{name}.sass").read_text()
        verdict = "DIFFERS" if name in differ else "same"
        print(f"{name:40s} {verdict:8s} {text.splitlines()[0]}  {instructions(text)} instructions")
    print(f"{len(names) - len(differ)} of {len(names)} configurations compile to identical SASS")
    return 1 if differ else 0


if __name__ == "__main__":
    command, *rest = sys.argv[1:] or ["list"]
    if command == "list":
        print("\n".join(_configs()))
    elif command == "dump":
        dump(Path(rest[0]), rest[1:])
    elif command == "compare":
        sys.exit(compare(Path(rest[0]), Path(rest[1])))
