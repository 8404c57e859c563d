"""The warp-specialized Hopper attention (fp16, fp8, int8) on one GPU: every tuned tile of each
format timed alone, its registers and spills, and its error against fp16 SDPA; one table.

Runs against either tree, so that one GPU call can measure main (three kernels,
attention_ws.py / attention_ws_fp8.py / attention_ws_int8.py) and the merged kernel (one
kernel, its QUANT constexpr; attention/attention_ws.py's `ws_calls`): `load_api` finds
whichever the tree has. Shapes: docs/perf/attention.md's (B 2, H 16, S 8192 and B 8, H 16,
S 2048; D 128; causal and not). The time is the Gluon kernel's alone (the fp8/int8
quantization passes run once before, unchanged by the merge), by opbench's own timer (L2
flushed, adaptive median). Registers and spills are the loaded kernel's (`n_regs`,
`n_spills`, from the driver).

    PYTHONPATH=. python3 benchmarks/attention_ws_before_after.py            # on an sm_90 GPU
    PYTHONPATH=. python3 benchmarks/attention_ws_before_after.py --tiny     # CPU: imports, args

With $OUT set, the rows also go to $OUT/attention_ws_<tree>.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch

FORMATS = ("fp16", "fp8", "int8")
SHAPES = [  # (B, H, S, D)
    (2, 16, 8192, 128),
    (8, 16, 2048, 128),
]
# Error against fp16 SDPA each format stays within (its quant tolerance, docs/suite-format.md).
LIMIT = {"fp16": 5e-3, "fp8": 8e-2, "int8": 3e-2}


def load_api() -> tuple[str, dict, Callable, Callable]:
    """(tree, tiles per format and head dim, ws_config, calls(fmt, q, k, v, out4, causal,
    config) -> KernelCalls): from the merged kernel if the tree has it, else from main's
    three (in family folders or not)."""
    try:
        from opbench.kernels.attention.attention_ws import WS_TILES, ws_calls
        from opbench.kernels.attention.attention_ws_step import ws_config

        def merged(fmt, q, k, v, out4, causal, config):
            return ws_calls(q, k, v, out4, causal=causal, quant=fmt, config=config)[0]

        return "merged", WS_TILES, ws_config, merged
    except ImportError:
        pass
    try:  # main's three kernels, in family folders
        from opbench.kernels.attention import attention_ws as f16
        from opbench.kernels.attention import attention_ws_fp8 as f8
        from opbench.kernels.attention import attention_ws_int8 as i8
        from opbench.kernels.attention.attention_ws_step import ws_config
    except ImportError:  # main's three kernels, flat
        from opbench.kernels.attention_ws_step import ws_config

        from opbench.kernels import attention_ws as f16
        from opbench.kernels import attention_ws_fp8 as f8
        from opbench.kernels import attention_ws_int8 as i8
    tiles = {"fp16": f16.WS_TILES, "fp8": f8.WS_FP8_TILES, "int8": i8.WS_INT8_TILES}

    def three(fmt, q, k, v, out4, causal, config):
        if fmt == "fp16":
            return [f16.ws_call(q, k, v, out4, causal=causal, config=config)[0]]
        fn = f8.ws_fp8_calls if fmt == "fp8" else i8.ws_int8_calls
        return fn(q, k, v, out4, causal=causal, config=config)[0]

    return "three", tiles, ws_config, three


def tile_name(tile) -> str:
    block_n, stages, pingpong, p_regs = tile
    return f"n{block_n}s{stages}{'pp' if pingpong else ''}{'r' if p_regs else ''}"


def registers(call) -> tuple[int, int, int]:
    """The loaded kernel's registers per thread, spilled bytes and shared memory."""
    compiled = call.kernel.warmup(*call.args, grid=call.grid, **call.named, **call.options)
    if hasattr(compiled, "result"):
        compiled = compiled.result()
    compiled._init_handles()
    return compiled.n_regs, compiled.n_spills, compiled.metadata.shared


def measure(args: argparse.Namespace) -> list[dict]:
    from opbench.measure.timer import time_callable
    from opbench.results.stats import median
    from opbench.spec.model import TimingSpec

    tree, tiles, ws_config, calls_of = load_api()
    timing = TimingSpec(max_ms=args.max_ms)
    rows = []
    for batch, heads, seq, head_dim in SHAPES:
        gen = torch.Generator().manual_seed(seq)
        x = torch.randn(batch, seq, 3, heads, head_dim, generator=gen).half().cuda()
        q, k, v = x[:, :, 0], x[:, :, 1], x[:, :, 2]
        for causal in (False, True):
            ref = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal
            ).transpose(1, 2)
            flops = 4 * batch * heads * seq * seq * head_dim / (2 if causal else 1)
            for fmt in args.formats:
                for tile in tiles[fmt][head_dim]:
                    out4 = torch.full_like(q, float("nan")).contiguous()
                    calls = calls_of(fmt, q, k, v, out4, causal, ws_config(tile))
                    for call in calls:  # quantization passes, then the kernel
                        call.call()
                    torch.cuda.synchronize()
                    err = ((out4.double() - ref.double()).norm() / ref.double().norm()).item()
                    kernel = calls[-1]
                    ms = median([t for r in time_callable(kernel.call, timing, "cuda").rounds
                                 for t in r])  # fmt: skip
                    regs, spills, shared = registers(kernel)
                    row = dict(tree=tree, fmt=fmt, B=batch, H=heads, S=seq, D=head_dim,
                               causal=causal, tile=tile_name(tile), ms=ms,
                               tflops=flops / ms / 1e9, regs=regs, spills=spills, shared=shared,
                               err=err, ok=err <= LIMIT[fmt] and not math.isnan(err))  # fmt: skip
                    rows.append(row)
                    print_row(row)
    return rows


HEADER = f"{'tree':6} {'fmt':4} {'shape':>16} {'causal':6} {'tile':9} {'ms':>8} {'TFLOP/s':>7} " \
         f"{'regs':>4} {'spill':>5} {'smem':>6} {'err':>8}"  # fmt: skip


def print_row(row: dict) -> None:
    shape = f"{row['B']}x{row['H']}x{row['S']}x{row['D']}"
    print(f"{row['tree']:6} {row['fmt']:4} {shape:>16} {str(row['causal']):6} {row['tile']:9} "
          f"{row['ms']:8.3f} {row['tflops']:7.0f} {row['regs']:4d} {row['spills']:5d} "
          f"{row['shared']:6d} {row['err']:8.1e}{'' if row['ok'] else '  OVER LIMIT'}",
          flush=True)  # fmt: skip


def tiny() -> None:
    """CPU: the API loads from this tree and each format's launcher builds its arguments and
    candidates (no GPU: ws_usable is false, so the kernel is never bound)."""
    tree, tiles, ws_config, calls_of = load_api()
    for fmt in FORMATS:
        for tile in tiles[fmt][128]:
            config = ws_config(tile)
            assert config["BLOCK_N"] == tile[0] and config["maxnreg"] > 0, config
    if tree == "merged":
        from opbench.kernels.attention.attention_ws import ws_args, ws_launch

        q, k, v = torch.randn(3, 1, 256, 2, 128, dtype=torch.float16)
        out = torch.empty_like(q)
        k8 = torch.empty(2, 256, 128, dtype=torch.int8)
        args = ws_args(q, k, v, out, "int8", [k8, torch.empty(2, 2)], 128)
        assert args.padded_len == 256 and args.v_scale is None
        _, candidates = ws_launch(q, k, v, out, False, "fp8", [])
        assert [c["KERNEL"] for c in candidates] == ["ws_fp8"] * len(tiles["fp8"][128])
    print(f"tiny: {tree} tree, {sum(len(t[128]) for t in tiles.values())} tiles at D 128: ok")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="CPU check: imports and arguments")
    parser.add_argument("--formats", nargs="+", default=list(FORMATS), choices=FORMATS)
    parser.add_argument("--max-ms", type=float, default=600.0, help="timing budget per tile")
    args = parser.parse_args()
    if args.tiny:
        tiny()
        return 0
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        print("needs an sm_90 GPU (or --tiny)", file=sys.stderr)
        return 2
    os.environ.setdefault("TRITON_INTERPRET", "0")
    print(torch.cuda.get_device_name(), "triton", __import__("triton").__version__)
    print(HEADER)
    rows = measure(args)
    if os.environ.get("OUT"):
        path = Path(os.environ["OUT"]) / f"attention_ws_{rows[0]['tree'] if rows else 'none'}.json"
        path.write_text(json.dumps(rows, indent=1))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
