"""`opbench export sas`: the ONNX export plus the script a SAS user runs to time each cut.

The script is sas_runner.py, copied as OUT/time_sas_prefixes.py with a header naming the
suite; it reads OUT/manifest.json at run time and needs no opbench. Every cut (a layer and
everything it depends on: export/cuts.py) is checked here against the rules of DLPy's ONNX
import (export/dlpy_rules.py), before anyone goes to the SAS machine. The manifest then says,
per cut, whether the script may send it (`sas.status`: ok or refused, with the problems)
and what it substitutes (`sas.stand_ins`), and per layer what becomes of it in SAS
(`sas.status`: timed, stand-in, refused, or not timed because a layer it depends on is
refused). The script does not send refused cuts; it writes them as not timed, with the
reason, so no layer goes missing silently.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opbench.export.dlpy_rules import (
    Problem,
    StandIn,
    apply_stand_ins,
    problems,
    softmax_output,
    stand_ins,
)
from opbench.export.files import Exported, export_suite
from opbench.export.sas_api import add_layer_api
from opbench.spec.model import SuiteSpec

SCRIPT = "time_sas_prefixes.py"
LAYER_API_HELPER = "sas_layer_api.py"  # the script imports it for the layer-API cuts


@dataclass(frozen=True)
class Notice:
    """What export tells the user about one layer (or, with layer None, a whole model)."""

    model: str
    layer: str | None
    level: str  # "warning": not timed; "note": timed with a stand-in
    text: str
    remedy: str = ""  # what can be done


@dataclass(frozen=True)
class SasExport:
    onnx: Exported
    script: Path
    notices: tuple[Notice, ...]
    timed: dict[str, tuple[int, int]]  # model -> (layers SAS can time, layers)


def _load(path: Path) -> Any:
    import onnx

    return onnx.load(str(path), load_external_data=False)  # the graph; weights are not needed


def _problem_json(p: Problem, layer_of: dict[str, str]) -> dict[str, str]:
    return {"layer": layer_of.get(p.node, ""), "node": p.node, "op": p.op, "why": p.why,
            "remedy": p.remedy}  # fmt: skip


def _check_model(out: Path, model: dict[str, Any]) -> list[Notice]:
    """Add the `sas` entries of one model's cuts and layers; the notices for the user."""
    from opbench.export.cuts import value_shapes

    whole = _load(out / model["file"])
    shapes = value_shapes(whole)
    subs = {s.node: s for s in stand_ins(whole)}
    layer_of = {node: layer["name"] for layer in model["layers"] for node in layer["onnx_nodes"]}
    by_name = {layer["name"]: layer for layer in model["layers"]}
    own: dict[str, list[Problem]] = {}  # layer -> problems of its own nodes in its own cut
    first_problem: dict[str, Problem] = {}  # layer -> the first problem of its cut
    for cut in model["cuts"]:
        proto = _load(out / cut["file"])
        here = [subs[n.name] for n in proto.graph.node if n.name in subs]
        found = problems(apply_stand_ins(proto, here), shapes)
        name = cut["layer"]
        cut["sas"] = {
            "status": "refused" if found else "ok",
            "problems": [_problem_json(p, layer_of) for p in found],
            "stand_ins": [s.as_json() for s in here],
            "output_layer": "softmax" if softmax_output(proto) else "identity",
        }
        mine = [p for p in found if layer_of.get(p.node) == name]
        if mine:
            own[name] = mine
        if found:
            first_problem[name] = found[0]
    notices: list[Notice] = []
    model_wide = [p for cut in model["cuts"] for p in cut["sas"]["problems"] if not p["node"]]
    if model_wide:
        lacking = sorted({p.op for found in own.values() for p in found if p.op})
        also = f"; DLPy also lacks {', '.join(lacking)}" if lacking else ""
        notices.append(
            Notice(model["name"], None, "warning",
                   f"{model_wide[0]['why']}: none of its {len(model['layers'])} layers can be "
                   f"timed in SAS{also}", model_wide[0]["remedy"])
        )  # fmt: skip
    for layer in model["layers"]:
        name = layer["name"]
        cut = next(c for c in model["cuts"] if c["layer"] == name)
        mine_subs = [StandIn(**s) for s in cut["sas"]["stand_ins"] if layer_of[s["node"]] == name]
        if name in own:
            p = own[name][0]
            layer["sas"] = {"status": "refused", "why": p.why, "remedy": p.remedy}
            after = [
                c["layer"] for c in model["cuts"] if name in c["members"] and c["layer"] != name
            ]
            listed = ", ".join(after[:6]) + (", …" if len(after) > 6 else "")
            also = f", nor the {len(after)} layer(s) that depend on it ({listed})" if after else ""
            if not model_wide:
                notices.append(
                    Notice(model["name"], name, "warning",
                           f"layer {name!r} ({layer['op']} → {p.op}): {p.why}; not timed{also}",
                           p.remedy)
                )  # fmt: skip
        elif name in first_problem:
            p = first_problem[name]
            culprit = layer_of.get(p.node, "")
            why = f"its cut holds layer {culprit!r}: {p.why}" if culprit else p.why
            layer["sas"] = {"status": "not timed", "why": why, "remedy": p.remedy}
        elif mine_subs:
            note = "; ".join(s.note for s in mine_subs)
            exact = all(s.op == "Log" for s in mine_subs)  # Sigmoid as LOGISTIC: same function
            layer["sas"] = {"status": "timed" if exact else "stand-in", "why": note, "remedy": ""}
            if not exact:
                notices.append(
                    Notice(model["name"], name, "note",
                           f"layer {name!r} ({by_name[name]['op']}): {note}; the CSV's status "
                           "column and compare's notes say so")
                )  # fmt: skip
        else:
            layer["sas"] = {"status": "timed", "why": "", "remedy": ""}
    return notices


def _api_notices(
    model: dict[str, Any], found: list[Notice], reasons: dict[str, str]
) -> list[Notice]:
    """The notices of a model some of whose cuts the layer API builds: a note per stand-in,
    and a warning per layer that neither API can build for a reason of its own (the layers
    depending on it are named with it)."""
    notices: list[Notice] = []
    for layer in model["layers"]:
        name, sas = layer["name"], layer["sas"]
        if sas["status"] == "stand-in" or (
            sas["status"] == "not timed" and "together" in sas["why"]
        ):
            notices.append(Notice(model["name"], name, "note", f"layer {name!r} ({layer['op']}): "
                                  f"{sas['why']}; the CSV's status column and compare's notes "
                                  "say so"))  # fmt: skip
        elif name in reasons and not reasons[name].startswith("its cut holds"):
            after = [c["layer"] for c in model["cuts"]
                     if name in c["members"] and c["layer"] in reasons and c["layer"] != name]  # fmt: skip
            listed = ", ".join(after[:6]) + (", …" if len(after) > 6 else "")
            also = f", nor the {len(after)} layer(s) that depend on it ({listed})" if after else ""
            onnx_why = sas["why"].split("; DLPy's layer API")[0]
            notices.append(Notice(model["name"], name, "warning", f"layer {name!r} "
                                  f"({layer['op']}): DLPy's layer API: {reasons[name]}; ONNX "
                                  f"import: {onnx_why}; not timed{also}"))  # fmt: skip
    return notices


def _qualify_rows(model: dict[str, Any]) -> None:
    """Name the CSV's rows `/<model>/<layer>` when the suite's layers carry the names of another
    engine (reference_name, as `suite from-onnx` writes them): compare then matches the rows to
    the layers by the model-qualified name, as it does for opbench's own ONNX Runtime profile
    (opbench/match/links.py, rule 3), and not by the other engine's names."""
    if not any(layer.get("reference_name") for layer in model["layers"]):
        return
    for layer in model["layers"]:
        layer["sas"]["row"] = f"/{model['name']}/{layer['name']}"


def annotate_for_sas(manifest_path: Path) -> tuple[list[Notice], dict[str, tuple[int, int]]]:
    """Check every cut of an export against DLPy's rules and write the `sas` entries into
    its manifest; the notices for the user and, per model, (layers SAS can time, layers)."""
    out = manifest_path.parent
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    notices: list[Notice] = []
    timed: dict[str, tuple[int, int]] = {}
    for model in manifest["models"]:
        found = _check_model(out, model)
        reasons = add_layer_api(out, model, _load(out / model["file"]))
        notices += _api_notices(model, found, reasons) if "sas_layer_api" in model else found
        _qualify_rows(model)
        ok = sum(layer["sas"]["status"] in ("timed", "stand-in") for layer in model["layers"])
        timed[model["name"]] = (ok, len(model["layers"]))
    manifest["sas"] = (
        "per cut: whether DLPy's ONNX import keeps it (status ok/refused, problems), the "
        "substitutions the script makes (stand_ins) and the output layer it adds; per layer: "
        "timed, stand-in, refused or not timed, with why and what can be done"
    )
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return notices, timed


def write_script(out: Path, suite: str) -> Path:
    """OUT/time_sas_prefixes.py: sas_runner.py with a header naming the suite."""
    source = (Path(__file__).parent / "sas_runner.py").read_text(encoding="utf-8")
    header = (
        f"# Generated by `opbench export sas` for suite {suite!r}. Run it where SAS Viya\n"
        "# is reachable: python time_sas_prefixes.py --help\n"
    )
    script = out / SCRIPT
    script.write_text(header + source, encoding="utf-8")
    helper = (Path(__file__).parent / "sas_runner_api.py").read_text(encoding="utf-8")
    (out / LAYER_API_HELPER).write_text(header + helper, encoding="utf-8")
    return script


def export_sas(
    suite: SuiteSpec,
    out: Path,
    *,
    models: Sequence[str] = (),
    log: Callable[[str], None] = lambda _msg: None,
) -> SasExport:
    exported = export_suite(suite, out, models=models, log=log)
    notices, timed = annotate_for_sas(exported.manifest)
    script = write_script(out, suite.name)
    return SasExport(exported, script, tuple(notices), timed)
