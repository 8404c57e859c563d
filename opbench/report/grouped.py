"""Notes that repeat, said once with a count: "pre-empted? samples spread 52% (IQR/median)" on
100 layers is one line naming the first few, not 100 lines. Notes group by their wording with
the numbers masked (each layer's spread differs, the warning does not).

Pure Python: no torch, no triton.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

SHOWN = 4  # subjects named per grouped line
_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[+-]?\d+)?")


def group_notes(entries: Iterable[tuple[str, str]]) -> list[str]:
    """(subject, note) pairs as lines: "subject: note" for a note said once; for a note said
    of several subjects, "note ×N: a, b, c, d and N-4 more" (the first one's wording)."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for subject, note in entries:
        groups.setdefault(_NUMBER.sub("#", note), []).append((subject, note))
    lines = []
    for items in groups.values():
        if len(items) == 1:
            lines.append(f"{items[0][0]}: {items[0][1]}")
            continue
        names = ", ".join(subject for subject, _ in items[:SHOWN])
        more = f" and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
        lines.append(f"{items[0][1]} ×{len(items)}: {names}{more}")
    return lines
