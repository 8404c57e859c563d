"""Plans of the weight-streaming decode kernels: `linear_stream._linear_stream_kernel` (the
fp16/bf16 GEMV and the first weight-only kernel, KIND "stream") and
`linear_stream_q._weight_only_kernel` (the second weight-only kernel, KIND "stream_q").

Each plan is a `tuning.Config` fixed by a rule, the same on every machine of one SM count
(`stream_plan`, `stream_q_plan`; their keyword defaults are the rules), and variants around
it (`stream_variants`, `stream_q_variants`) that benchmarks time side by side and tests run.
K splits are either powers of two or sized to whole waves of resident programs
(`wave_split`). The measurements behind each rule: docs/perf/gemm.md.
"""

from __future__ import annotations

from opbench.kernels.gemm.linear_plans import MIN_STEPS_PER_SPLIT, SMALL_M, small_m_block
from opbench.kernels.host import INTERPRET, cdiv
from opbench.kernels.tuning import Config

# ---- the first kernel (linear_stream.py): decode GEMV and weight-only formats ----

# fp16/bf16 linears with at most this many rows stream W through `_linear_stream_kernel`
# instead of the split-K GEMM (both measured side by side: docs/perf/gemm.md, 2026-11-25).
GEMV_MAX_M = 16
# Bytes of one W row each program reads per step: two full 128-byte lines.
STREAM_ROW_BYTES = 256
# Tile width and programs per SM by weight format, the rule's choice among the variants of
# `stream_candidates` measured side by side on the H100 (2026-11-25, docs/perf/gemm.md; M <= 16,
# four LLaMA-7B shapes; geometric mean of each variant's time over the best one's): fp16 64
# columns at 2 per SM (1.02-1.03); int8 32 columns for M = 2..16 (1.03, against 1.07 for 64)
# and 64 for one row (1.08, against 1.19 for 32); int4 4 per SM, i.e. twice the K splits
# (1.005-1.014, against 1.14-1.24 for 2 per SM).
STREAM_BLOCK_N = {16: 64, 8: 32, 4: 64}
STREAM_PROGRAMS = {16: 2, 8: 2, 4: 4}
MAX_STREAM_SPLIT = 8
# Wave-sized grids (`wave_split`, plans with waves=True): any SPLIT_K up to this, not only
# powers of two, so that tiles x SPLIT_K fills whole waves of resident programs.
MAX_WAVE_SPLIT = 16
# One fp16/bf16 row (M = 1), since 2026-11-26: the CUDA-core GEMV (no tensor cores; W loaded
# straight into registers, 156 of them a thread: 3 programs fit an SM) on a wave-sized grid of
# up to 3 programs per SM. On an H200 it ran within 0.7% of the fastest variant on average
# over the 4 LLaMA-7B shapes, where the tensor-core rule (power-of-two splits, 1-2 programs
# per SM, 172-192 of them at N >= 11008) was 14% over (docs/perf/gemm.md).
GEMV_ONE_ROW_PROGRAMS = 3


def wave_split(tiles: int, k_steps: int, sm_count: int, per_sm: int) -> int:
    """SPLIT_K for `tiles` output tiles of `k_steps` K steps each, sized to whole waves: of the
    splits that keep the programs P = tiles x split within `per_sm` per SM and every split at
    least MIN_STEPS_PER_SPLIT steps long (split K steps are balanced, see the kernels), the one
    with the most programs per slot actually used, P x P / (SMs x ceil(P / SMs)): the busiest
    SM runs ceil(P / SMs) programs while the average runs P / SMs (the 2026-11-26 Nsight
    profile: 172 programs on 132 SMs left 40 SMs with twice the work, DRAM at 59%)."""
    best, best_score = 1, 0.0
    for split in range(1, MAX_WAVE_SPLIT + 1):
        programs = tiles * split
        if split > 1 and (programs > per_sm * sm_count or k_steps < split * MIN_STEPS_PER_SPLIT):
            break
        score = programs * programs / (sm_count * cdiv(programs, sm_count))
        if score > best_score:
            best, best_score = split, score
    return best


def stream_plan(
    m: int, n: int, k: int, w_bits: int, group_size: int, sm_count: int, *,
    block_n: int | None = None, row_bytes: int = STREAM_ROW_BYTES, use_dot: bool | None = None,
    num_warps: int = 4, num_stages: int = 4, programs_per_sm: int | None = None,
    fast_unpack: bool = True, waves: bool | None = None,
) -> Config:  # fmt: skip
    """The plan of `_linear_stream_kernel` for an [m, k] x [k, n] product with W in `w_bits`.

    One M tile of M rounded up to a power of two (at least 16 for the tensor cores, at most
    SMALL_M; exactly 1 for the CUDA-core GEMV, which takes M = 1 only); `block_n` columns
    (default STREAM_BLOCK_N of the format); `row_bytes` of each W row per step (int4: at most
    one group); SPLIT_K, with a single M tile only, the largest power of two up to
    MAX_STREAM_SPLIT keeping the programs within `programs_per_sm` per SM (default
    STREAM_PROGRAMS of the format) and every split at least MIN_STEPS_PER_SPLIT steps long:
    enough loads in flight to stream W; with `waves`, `wave_split` (any split, whole waves).
    The defaults are the rule: tensor cores, power-of-two splits; for one fp16/bf16 row
    (w_bits 16, M = 1) the CUDA-core GEMV on whole waves of GEMV_ONE_ROW_PROGRAMS per SM.
    Under the interpreter, small tiles that still take the split-K path."""
    one_row = m == 1 and w_bits == 16
    use_dot = not one_row if use_dot is None else use_dot
    if not use_dot and m != 1:
        raise ValueError("the CUDA-core GEMV (use_dot=False) takes one row")
    one_row_rule = one_row and not use_dot  # the CUDA-core GEMV of one fp16/bf16 row
    waves = one_row_rule if waves is None else waves
    if block_n is None:
        block_n = 64 if m == 1 else STREAM_BLOCK_N[w_bits]
    if programs_per_sm is None:
        programs_per_sm = GEMV_ONE_ROW_PROGRAMS if one_row_rule else STREAM_PROGRAMS[w_bits]
    block_m = small_m_block(min(m, SMALL_M)) if use_dot else 1
    if INTERPRET:
        block_n, row_bytes, num_warps, num_stages = 16, 32 * w_bits // 8, 4, 1
    block_k = row_bytes * 8 // w_bits
    if w_bits == 4:
        block_k = min(block_k, group_size)
    m_tiles = cdiv(m, block_m)
    tiles = cdiv(n, block_n) * m_tiles
    k_steps = cdiv(k, block_k)
    if waves and m_tiles == 1:
        split_k = wave_split(tiles, k_steps, sm_count, programs_per_sm)
    else:
        split_k = _power_split(tiles if m_tiles == 1 else 0, k_steps, sm_count, programs_per_sm)
    return Config.of(
        KIND="stream", BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, SPLIT_K=split_k,
        USE_DOT=use_dot, FAST_UNPACK=fast_unpack and w_bits != 16, num_warps=num_warps,
        num_stages=num_stages,
    )  # fmt: skip


def _power_split(tiles: int, k_steps: int, sm_count: int, per_sm: int) -> int:
    """The largest power of two up to MAX_STREAM_SPLIT keeping tiles x split within per_sm
    per SM and every split at least MIN_STEPS_PER_SPLIT steps long (1 for tiles = 0)."""
    split_k = 1
    while (0 < tiles * split_k * 2 <= per_sm * sm_count and split_k < MAX_STREAM_SPLIT
           and k_steps // (2 * split_k) >= MIN_STEPS_PER_SPLIT):  # fmt: skip
        split_k *= 2
    return split_k


# Wave-sized variants (waves=True) offered beside each rule: programs per SM x pipeline
# stages (fewer stages: less shared memory a program, so more fit on an SM at once).
WAVE_VARIANTS = [{"waves": True, "programs_per_sm": r, "num_stages": s}
                 for r in (3, 4, 6, 8) for s in (2, 3, 4)]  # fmt: skip


def stream_variants(m: int, w_bits: int) -> list[dict]:
    """`stream_plan` keyword sets around its rule, the rule ({}) first: tile width, bytes per
    step, pipeline depth, programs per SM, wave-sized grids, the CUDA-core GEMV for one row."""
    variants = [
        {}, {"block_n": 32}, {"block_n": 64}, {"block_n": 128, "num_warps": 8},
        {"row_bytes": 512, "num_stages": 3}, {"row_bytes": 128, "num_stages": 6},
        {"programs_per_sm": 4}, {"programs_per_sm": 1},
    ]  # fmt: skip
    if w_bits == 4:  # one group per step whatever row_bytes says: vary the tile instead
        variants = [{}, {"block_n": 32}, {"block_n": 128}, {"block_n": 128, "num_warps": 8},
                    {"num_stages": 6}, {"programs_per_sm": 2}, {"programs_per_sm": 1}]  # fmt: skip
    waves = WAVE_VARIANTS + [{"waves": True, "programs_per_sm": 4, "num_stages": 3,
                              "block_n": bn, "num_warps": w}
                             for bn, w in ((32, 4), (128, 8))]  # fmt: skip
    variants += [{**v, "use_dot": True} for v in waves]  # tensor cores at every M
    if m == 1:  # the CUDA-core GEMV: the fp16 rule; for int8/int4 a variant
        variants += [{"use_dot": True}, {"use_dot": False}, {"use_dot": False, "waves": False},
                     {"use_dot": False, "block_n": 32}, {"use_dot": False, "waves": False,
                     "programs_per_sm": 2, "block_n": 32}]  # fmt: skip
        variants += [{"use_dot": False, "waves": True, "programs_per_sm": r, "num_stages": s}
                     for r, s in ((2, 3), (3, 3), (4, 3), (6, 1))]  # fmt: skip
    if w_bits != 16:  # the integer -> float conversion instruction instead of the mantissa trick
        variants += [{"fast_unpack": False}, {"fast_unpack": False, "programs_per_sm": 2}]
    return variants


def stream_candidates(
    m: int, n: int, k: int, w_bits: int, group_size: int, sm_count: int
) -> list[Config]:
    """The distinct plans of `stream_variants` (benchmarks time them side by side; tests run
    each), the rule's own plan first."""
    plans: list[Config] = []
    for variant in stream_variants(m, w_bits):
        plan = stream_plan(m, n, k, w_bits, group_size, sm_count, **variant)
        if plan not in plans:
            plans.append(plan)
    return plans


# ---- the weight-only kernel, second design (linear_stream_q.py) ----

# The rule for fp16 activations, M <= 16 (int8 and int4 with groups >= 32): the packed PTX
# unpack, x the left operand, and by weight format the tile width and programs per SM of the
# variant that was fastest (or within 2%) at every measured point: H100, 2026-11-25 evening,
# 4 LLaMA-7B shapes x M = 1, 4, 16 against every variant of `stream_q_candidates`
# (docs/perf/gemm.md). bf16 keeps the first kernel: this one was not measured with it.
# int4 since 2026-11-26 (H100, docs/perf/gemm.md): wave-sized grids (`wave_split`) of up to
# 4 programs per SM with 3 stages (16 KB of shared memory, 96 registers: 5 fit an SM), the
# variant within 0.5% of the fastest on average over the 12 points (worst 2.6%), where the
# earlier rule (power-of-two splits, 4 stages) was 6.5% over (worst 14.7%, 4096 -> 11008).
STREAM_Q_BLOCK_N = {8: 32, 4: 64}
STREAM_Q_PROGRAMS = {8: 2, 4: 4}
STREAM_Q_STAGES = {8: 4, 4: 3}
STREAM_Q_WAVES = {8: False, 4: True}
STREAM_Q_MAX_M = 16
STREAM_Q_MIN_GROUP = 32


def stream_q_applies(m: int, w_bits: int, group_size: int, fp16: bool) -> bool:
    """Whether the rule runs a weight-only layer on the second kernel (else the first)."""
    return (fp16 and m <= STREAM_Q_MAX_M
            and (w_bits == 8 or group_size >= STREAM_Q_MIN_GROUP))  # fmt: skip


def stream_q_plan(
    m: int, n: int, k: int, w_bits: int, group_size: int, sm_count: int, *,
    w_left: bool = False, block_n: int | None = None, row_bytes: int = STREAM_ROW_BYTES,
    num_warps: int = 4, num_stages: int | None = None, programs_per_sm: int | None = None,
    asm: bool = True, waves: bool | None = None, maxnreg: int | None = None,
) -> Config:  # fmt: skip
    """A plan of `linear_stream_q._weight_only_kernel` for M <= 16 rows, W in `w_bits` (8, 4);
    the defaults are the rule. One 16-row M tile; `block_n` columns (default
    STREAM_Q_BLOCK_N); `row_bytes` of each W row per step (int4: at most one group, so a step
    never straddles two, and at least 32 codes); SPLIT_K as in `stream_plan`: the largest
    power of two up to MAX_STREAM_SPLIT keeping the programs within `programs_per_sm` per SM
    (default STREAM_Q_PROGRAMS) and every split at least MIN_STEPS_PER_SPLIT steps long,
    or with `waves` (default STREAM_Q_WAVES) by `wave_split` (any split, whole waves);
    `num_stages` default STREAM_Q_STAGES; `asm`: codes by the packed PTX unpack (ASM_UNPACK;
    fp16 on a GPU, else Triton ops); `maxnreg`: a register cap (more programs fit an SM).
    Under the interpreter, small tiles."""
    if m > STREAM_Q_MAX_M:
        raise ValueError(f"stream_q plans take at most {STREAM_Q_MAX_M} rows, not {m}")
    block_n = STREAM_Q_BLOCK_N[w_bits] if block_n is None else block_n
    programs_per_sm = STREAM_Q_PROGRAMS[w_bits] if programs_per_sm is None else programs_per_sm
    num_stages = STREAM_Q_STAGES[w_bits] if num_stages is None else num_stages
    waves = STREAM_Q_WAVES[w_bits] if waves is None else waves
    if INTERPRET:
        block_n, row_bytes, num_warps, num_stages = 16, 16 if w_bits == 4 else 32, 4, 1
        maxnreg = None
    block_k = row_bytes * 8 // w_bits
    if w_bits == 4:
        block_k = min(block_k, group_size)
        if block_k < STREAM_Q_MIN_GROUP:
            raise ValueError(f"int4 steps need groups of >= 32 codes, not {group_size}")
    tiles = cdiv(n, block_n)
    k_steps = cdiv(k, block_k)
    split = wave_split if waves else _power_split
    split_k = split(tiles, k_steps, sm_count, programs_per_sm)
    return Config.of(
        KIND="stream_q", BLOCK_M=16, BLOCK_N=block_n, BLOCK_K=block_k, SPLIT_K=split_k,
        W_LEFT=w_left, ASM_UNPACK=asm, num_warps=num_warps, num_stages=num_stages,
        maxnreg=maxnreg,
    )  # fmt: skip


def stream_q_variants() -> list[dict]:
    """`stream_q_plan` keyword sets around its rule, the rule ({}) first: tile width, warps,
    bytes per step, programs per SM, W as the left operand, Triton ops instead of the packed
    unpack, wave-sized grids."""
    return [
        {}, {"block_n": 32}, {"block_n": 64}, {"block_n": 128, "num_warps": 8},
        {"num_warps": 8}, {"programs_per_sm": 2}, {"programs_per_sm": 4},
        {"programs_per_sm": 8}, {"row_bytes": 128, "num_stages": 6}, {"w_left": True},
        {"asm": False}, {"asm": False, "w_left": True},
        *WAVE_VARIANTS,
        *({"waves": True, "programs_per_sm": 4, "num_stages": 3, "block_n": bn,
           "num_warps": w} for bn, w in ((32, 4), (64, 4), (128, 8), (128, 4))),
        # Before 2026-11-26 the int4 rule; and more programs an SM (5 fit by registers, 6
        # with at most 80 registers a thread: ptxas spills 20 bytes).
        {"waves": False, "num_stages": 4}, {"waves": True, "programs_per_sm": 5, "num_stages": 3},
        {"waves": True, "programs_per_sm": 5, "num_stages": 2},
        {"waves": True, "programs_per_sm": 6, "num_stages": 3, "maxnreg": 80},
    ]  # fmt: skip


def stream_q_candidates(
    m: int, n: int, k: int, w_bits: int, group_size: int, sm_count: int
) -> list[Config]:
    """The distinct plans of `stream_q_variants`, the rule's first (benchmarks time them side
    by side, tests run each). None for int4 groups under 32 codes."""
    if w_bits == 4 and group_size < STREAM_Q_MIN_GROUP:
        return []
    plans: list[Config] = []
    for variant in stream_q_variants():
        plan = stream_q_plan(m, n, k, w_bits, group_size, sm_count, **variant)
        if plan not in plans:
            plans.append(plan)
    return plans
