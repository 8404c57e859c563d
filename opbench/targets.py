"""The speed-up a layer must reach when nothing sets its own: defined here once.

A module of its own, pure and without imports, so that every stage that needs the default (the
spec's resolver, the results model, compare) reads the same number without importing each other.
"""

from __future__ import annotations

# Lower bound of the 95% interval of reference time / opbench time a layer needs to PASS.
DEFAULT_TARGET_SPEEDUP = 1.5
