"""Tuned plans that ship with the package, one table per GPU model, so that a run on a fresh
machine tunes only the kernels its table lacks.

A table is `opbench/kernels/shipped/<GPU name, non-alphanumerics as _>.json`:

    {"opbench_shipped_plans": 1, "device": "NVIDIA H100 80GB HBM3", "capability": "sm90",
     "triton": "3.6.0", "command": "<the last>", "commands": ["<every merge, oldest first>"],
     "plans": {"<kernel>|<key>": {"config": {...}}}}

keyed like the plan cache (`tuning.choose`'s kernel name and key: shapes, dtypes, layout),
never by suite, model or layer: any layer of a tuned shape finds its plan. A table applies
to a GPU of the same name and compute capability with a Triton of the same major.minor
version (a plan's tiles compile differently across Triton releases); `lookup` answers None
otherwise, and the kernel tunes as before. `opbench plans tune` writes the tables.

Plain Python: no torch, no triton.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SHIPPED_FORMAT = 1
SHIPPED_DIR = Path(__file__).with_name("shipped")


def split_tag(tag: str) -> tuple[str, str, str]:
    """(GPU name, "smXY", Triton version) of a `tuning.device_tag`."""
    name, capability, triton = (tag.split("|") + ["", ""])[:3]
    return name, capability, triton.removeprefix("triton-")


def table_path(gpu_name: str, folder: Path | None = None) -> Path:
    """The table file of a GPU model, in `folder` (default: the package's SHIPPED_DIR)."""
    name = re.sub(r"[^A-Za-z0-9]+", "_", gpu_name).strip("_") + ".json"
    return (folder if folder is not None else SHIPPED_DIR) / name


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


@functools.cache
def _table(path: Path) -> Mapping[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("opbench_shipped_plans") != SHIPPED_FORMAT:
        return None
    return data


def lookup(tag: str, kernel: str, key: str, folder: Path | None = None) -> Mapping | None:
    """The shipped config record ({"config": ...}) for `kernel`/`key` on the GPU `tag`
    names, or None (no table, another capability or Triton release, or no such entry)."""
    name, capability, triton = split_tag(tag)
    table = _table(table_path(name, folder))
    if table is None or table.get("device") != name or table.get("capability") != capability:
        return None
    if _minor(str(table.get("triton", ""))) != _minor(triton):
        return None
    entry = table.get("plans", {}).get(f"{kernel}|{key}")
    return entry if isinstance(entry, dict) and "config" in entry else None


def merge_table(
    path: Path, tag: str, entries: Mapping[str, Mapping[str, Any]], command: str
) -> dict[str, Any]:
    """The table at `path` with `entries` ({"<kernel>|<key>": {"config": ...}}) added or
    replaced, for the GPU `tag` names. A table of another GPU or Triton release is replaced
    whole. Returns the table to write."""
    name, capability, triton = split_tag(tag)
    old = _table(path)
    _table.cache_clear()
    same = bool(old) and old.get("device") == name and old.get("capability") == capability \
        and _minor(str(old.get("triton", ""))) == _minor(triton)  # fmt: skip
    keep = dict(old.get("plans", {})) if same else {}
    keep.update({k: {"config": dict(v["config"])} for k, v in entries.items()})
    # Every command that merged into a kept table, oldest first: what the table covers.
    history = list(old.get("commands") or [old.get("command")]) if same else []
    commands = [c for c in history if isinstance(c, str)] + [command]
    return {"opbench_shipped_plans": SHIPPED_FORMAT, "device": name, "capability": capability,
            "triton": triton, "command": command, "commands": commands,
            "plans": dict(sorted(keep.items()))}  # fmt: skip


def entries_of_choices(choices: list[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Plan-table entries from recorded choices (a run's plans): the tuned ones only (a
    "fixed" choice had one candidate and needs no table)."""
    found = {}
    for choice in choices:
        if choice.get("source") in ("tuned", "cache", "shipped", "reused", "retuned"):
            found[f"{choice['kernel']}|{choice['key']}"] = {"config": dict(choice["config"])}
    return found
