"""The `.meta.json` beside a profile `opbench reference onnxruntime` wrote: how the reference
ran (threads, batch, dtype), set against how the run ran. A reference timed another way is no
fair yardstick: compare says so in the reference's notes.

Pure Python: no torch, no triton.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def meta_path_for(profile: Path) -> Path:
    return profile.with_name(profile.stem + ".meta.json")


@dataclass(frozen=True)
class Sidecar:
    """The `.meta.json` found beside a profile. `problem`: why it could not be used (invalid
    JSON, not an object, not opbench's), said once as a warning; then `meta` is empty."""

    path: Path
    meta: Mapping[str, Any]
    problem: str | None = None


def read_sidecar(profile: Path) -> Sidecar | None:
    """The sidecar beside `profile`, or None when there is none. One that cannot be read is
    returned with its problem, never dropped without a word: the profile still stands on its
    own (a profile without a sidecar is read the same way), but the user learns that the
    threads, batch and dtype of the reference went unchecked."""
    path = meta_path_for(profile)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        return Sidecar(path, {}, f"cannot be read ({exc.strerror or exc})")
    except UnicodeDecodeError:
        return Sidecar(path, {}, "is not UTF-8 text")
    except json.JSONDecodeError as exc:
        return Sidecar(
            path, {}, f"is not valid JSON ({exc.msg}: line {exc.lineno} column {exc.colno})"
        )
    if not isinstance(data, dict):
        return Sidecar(path, {}, "holds no JSON object")
    if not data.get("opbench_reference"):
        return Sidecar(path, {}, "has no 'opbench_reference' key: not written by opbench")
    return Sidecar(path, data, None)


def _run_batches(run: Any) -> dict[str, Any]:
    models = run.suite_spec.get("models") if isinstance(run.suite_spec, Mapping) else None
    out: dict[str, Any] = {}
    for model in models or ():
        if isinstance(model, Mapping) and isinstance(model.get("name"), str):
            out[model["name"]] = model.get("batch")
    return out


def sidecar_warnings(sidecar: Sidecar, run: Any, backend: str | None) -> list[str]:
    """One sentence for each way the reference ran unlike the run: CPU threads (a CPU run),
    batch, dtype; or the one reason the sidecar could not be used, or a field of it."""
    if sidecar.problem is not None:
        return [
            f"warning: {sidecar.path} {sidecar.problem}: the reference's threads, batch and "
            "dtype are not checked against the run's; profile again with `opbench reference "
            "onnxruntime`, or delete the file"
        ]
    meta = sidecar.meta
    name = sidecar.path.name
    warnings = [
        f"warning: {sidecar.path}: {key} is {json.dumps(meta[key])}, not {kind}: not checked"
        for key, kind, ok in (
            ("intra_op_threads", "a whole number", lambda v: type(v) is int),
            ("batch", "an object of batches by model", lambda v: isinstance(v, Mapping)),
            ("dtype", "a dtype name", lambda v: isinstance(v, str)),
        )
        if meta.get(key) is not None and not ok(meta[key])
    ]
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
