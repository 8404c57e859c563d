"""Rule 5 of matching: what no name links is aligned by execution order, op type and output
shape: the longest in-order alignment of the left-over rows and layers whose op family and
shape agree.

Pure Python: no torch, no triton.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from opbench.match.names import families_agree, op_family, shapes_agree
from opbench.match.suite_layers import SuiteLayer, SuiteModel
from opbench.reference.interface import Flag
from opbench.reference.model import ReferenceTiming, RefStatus


def align_left_over(
    model: SuiteModel,
    rows: Sequence[ReferenceTiming],
    candidates: Iterable[int],
    linked_rows: Collection[int],
    used_layers: Collection[str],
) -> list[tuple[int, str]]:
    """(row, layer) pairs for the timed rows and the layers nothing linked yet."""
    left_rows = [
        pos
        for pos in candidates
        if pos not in linked_rows
        and rows[pos].status == RefStatus.TIMED
        and op_family(rows[pos].raw_type)
    ]
    left_layers = [layer for layer in model.layers if layer.name not in used_layers]
    return [(pos, layer.name) for pos, layer in _align(rows, left_rows, left_layers)]


def _align(
    rows: Sequence[ReferenceTiming], left_rows: Sequence[int], left_layers: Sequence[SuiteLayer]
) -> list[tuple[int, SuiteLayer]]:
    """Longest in-order alignment of rows with layers whose op family and shape agree."""
    n, m = len(left_rows), len(left_layers)
    if not n or not m:
        return []

    def agree(i: int, j: int) -> bool:
        row, layer = rows[left_rows[i]], left_layers[j]
        return families_agree(op_family(row.raw_type), layer.op) and shapes_agree(
            row.output_shape, layer.output_shape, Flag.BLOCKED_LAYOUT in row.flags
        )

    best = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            if agree(i, j):
                best[i][j] = 1 + best[i + 1][j + 1]
            else:
                best[i][j] = max(best[i + 1][j], best[i][j + 1])
    pairs: list[tuple[int, SuiteLayer]] = []
    i = j = 0
    while i < n and j < m:
        if agree(i, j) and best[i][j] == 1 + best[i + 1][j + 1]:
            pairs.append((left_rows[i], left_layers[j]))
            i, j = i + 1, j + 1
        elif best[i + 1][j] >= best[i][j + 1]:
            i += 1
        else:
            j += 1
    return pairs
