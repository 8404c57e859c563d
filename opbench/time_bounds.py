"""What a measured time can be: the one bound shared by the run reader and the reference readers.

A time that no call can take (NaN, infinite, negative, zero for a timed call, or above a day)
is refused where it is read. Left in, it becomes a speed-up of 0 or infinity, a "PASS" the
gate accepts, or a sum that overflows to infinity inside the statistics.

Pure Python, and imports nothing of opbench: results/ and reference/ both read it.
"""

from __future__ import annotations

import math

# One day: no single timed call of a layer or a model takes longer, and every statistic of
# times this large (sums, squares in the gate's variances) stays far from overflow.
MAX_TIME_MS = 86_400_000.0


def time_problem(value_ms: float, *, zero_allowed: bool = False) -> str | None:
    """Why `value_ms` cannot be a measured time, in words, or None where it can.

    `zero_allowed`: a reference engine may round a layer's time away to 0 (compare then
    judges nothing against it); opbench's own timer never gives 0 for a call it timed.
    """
    if not math.isfinite(value_ms):
        return "not a finite number"
    if value_ms < 0:
        return "a negative time"
    if value_ms == 0 and not zero_allowed:
        return "a time of zero"
    if value_ms > MAX_TIME_MS:
        return f"above a day ({MAX_TIME_MS:.0f} ms): no timed call takes that long"
    return None
