"""The `.meta.json` beside a profile `opbench reference onnxruntime` wrote: how the reference
ran (threads, batch, dtype), set against how the run ran. A reference timed another way is no
fair yardstick: compare says so in the reference's notes.

Pure Python: no torch, no triton.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def meta_path_for(profile: Path) -> Path:
    return profile.with_name(profile.stem + ".meta.json")


def read_sidecar(profile: Path) -> dict[str, Any] | None:
    """The sidecar's contents, or None when there is none (or it cannot be read: the profile
    stands on its own, the sidecar only adds warnings)."""
    path = meta_path_for(profile)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("opbench_reference") else None


def _run_batches(run: Any) -> dict[str, Any]:
    models = run.suite_spec.get("models") if isinstance(run.suite_spec, Mapping) else None
    out: dict[str, Any] = {}
    for model in models or ():
        if isinstance(model, Mapping) and isinstance(model.get("name"), str):
            out[model["name"]] = model.get("batch")
    return out


def sidecar_warnings(meta: Mapping[str, Any], run: Any, backend: str | None) -> list[str]:
    """One sentence for each way the reference ran unlike the run: CPU threads (a CPU run),
    batch, dtype."""
    name = meta_path_for(Path(str(meta.get("profile") or "profile.json"))).name
    warnings: list[str] = []
    ref_threads = meta.get("intra_op_threads")
    run_threads = run.env.get("threads") if isinstance(run.env, Mapping) else None
    if (
        run.device == "cpu"
        and isinstance(ref_threads, int)
        and isinstance(run_threads, int)
        and ref_threads != run_threads
    ):
        warnings.append(
            f"warning: the reference ran on {ref_threads} CPU thread(s) and the run on "
            f"{run_threads} ({name}): the speed-ups compare unequal work; profile again "
            f"with `opbench reference onnxruntime --threads {run_threads}`"
        )
    batches = meta.get("batch")
    if isinstance(batches, Mapping):
        ours = _run_batches(run)
        for model, batch in batches.items():
            if model in ours and ours[model] is not None and batch != ours[model]:
                warnings.append(
                    f"warning: the reference ran {model} at batch {batch} and the run at batch "
                    f"{ours[model]} ({name})"
                )
    dtype = meta.get("dtype")
    dtypes = {r.dtype for r in run.layers if backend is None or r.backend == backend}
    if isinstance(dtype, str) and dtypes and dtypes != {dtype}:
        warnings.append(
            f"warning: the reference ran in {dtype} and the run in {', '.join(sorted(dtypes))} "
            f"({name})"
        )
    return warnings
