"""Statistics of one layer's samples, as ReferenceTiming keyword arguments (milliseconds)."""

from __future__ import annotations

from collections.abc import Iterable


def sample_stats(samples: Iterable[float]) -> dict[str, float | int | None]:
    """count, median, mean, min, max and total of the samples; only count=0 when there are none."""
    values = sorted(samples)
    n = len(values)
    if n == 0:
        return {"count": 0}
    mid = n // 2
    total = sum(values)
    return {
        "count": n,
        "median_ms": values[mid] if n % 2 else (values[mid - 1] + values[mid]) / 2,
        "mean_ms": total / n,
        "min_ms": values[0],
        "max_ms": values[-1],
        "total_ms": total,
    }
