"""Time a suite's models in SAS Viya, one cut per layer, and write opbench's sas-prefix CSV.

Written by `opbench export sas`; run it where SAS Viya is reachable, from the export folder
(it reads manifest.json and the ONNX files beside it). It needs Python 3.8+, numpy, onnx,
swat, sas-dlpy and h5py; it does not need opbench.

    python time_sas_prefixes.py --host cas.example.com --port 5570 \\
        --server-weights-dir /shared/opbench_weights --weights-dir /mnt/shared/opbench_weights

The cut of a layer is the layer and every layer it depends on, with one input and one
output; its time minus the times of the cuts inside it is the layer's time, which opbench
derives (docs/sas.md). Each model's baseline (its input passed through) is timed first.

Connection: --host/--port, else CASHOST/CASPORT; --protocol, else CASPROTOCOL (swat's default
otherwise). Credentials: --username with the password from ~/.authinfo (or --authinfo FILE),
as swat reads them; nothing is written to any file. Each cut is converted by DLPy's ONNX
importer (dlpy.model_conversion.sas_onnx_parse.onnx_to_sas, what Model.from_onnx_model uses)
with an identity output layer (DLPy's softmax output layer where the cut ends in a Softmax
after a Dense layer), after the substitutions the manifest lists (ReLU6 timed as ReLU),
built with deeplearn.buildModel/addLayer, its weights loaded with
deeplearn.dlImportModelWeights from the HDF5 file the importer writes (which the CAS server
must see: --weights-dir here is --server-weights-dir there; the file is deleted once loaded),
then scored on the fixed input batch with deeplearn.dlScore: --warmup calls, then --repeats
timed calls. The time of a call is the elapsed time the CAS server reports for that action
(CASResults.performance). The cut's tables are dropped from CAS before the next cut.

Output, one CSV per model (opbench's `sas-prefix` format, graph form): layer, type, inputs
(the layer's producers, space-separated), prefix_median_ms, prefix_std_ms, prefix_min_ms,
runs, status; with --rounds K > 1, a `round` column and one row per cut and round. The file
is written row by row. A cut that is not timed (DLPy's import refuses it, which export
already said; or an action failed) is a row without times whose status says why, after a
comment line with the same; the rows already measured stay, and the next cut is tried.
"""

import argparse
import csv
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASLIB = "OPBENCHW"
COLUMNS = ["layer", "type", "inputs", "prefix_median_ms", "prefix_std_ms", "prefix_min_ms",
           "runs", "status"]  # fmt: skip


class PrefixError(Exception):
    """This cut cannot be timed; the message says why."""


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", help="CAS host (default: $CASHOST)")
    p.add_argument("--port", type=int, help="CAS port (default: $CASPORT)")
    p.add_argument("--protocol", help="cas, http or https (default: $CASPROTOCOL, else swat's)")
    p.add_argument("--username", help="user name; the password comes from the authinfo file")
    p.add_argument("--authinfo", help="authinfo file (default: swat's, ~/.authinfo)")
    p.add_argument("--warmup", type=int, default=2, help="untimed scoring calls per cut")
    p.add_argument("--repeats", type=int, default=10, help="timed scoring calls per cut")
    p.add_argument("--rounds", type=int, default=1,
                   help="time every cut this many times in turn (a `round` column; opbench "
                        "drops the first round as warm-up and takes the spread between rounds)")  # fmt: skip
    p.add_argument("--weights-dir", default=str(HERE / "sas_weights"),
                   help="where DLPy writes the HDF5 weights (client side)")  # fmt: skip
    p.add_argument("--server-weights-dir",
                   help="the same directory as the CAS server sees it (default: --weights-dir)")  # fmt: skip
    p.add_argument("--keep-weights", action="store_true",
                   help="keep each cut's HDF5 file (default: deleted once CAS has loaded it)")  # fmt: skip
    p.add_argument("--model", action="append", default=[], help="only this model (repeatable)")
    p.add_argument("--gpu", action="store_true", help="score on the server's GPU")
    p.add_argument("--out-dir", default=str(HERE), help="where the CSV files go")
    args = p.parse_args(argv)
    args.host = args.host or os.environ.get("CASHOST")
    port = args.port or os.environ.get("CASPORT")
    args.protocol = args.protocol or os.environ.get("CASPROTOCOL")
    missing = [what for what, value in (("host (--host or CASHOST)", args.host),
                                        ("port (--port or CASPORT)", port)) if not value]  # fmt: skip
    if missing:
        p.error("no CAS " + " and no CAS ".join(missing) + " given")
    args.port = int(port)
    if args.warmup < 0 or args.repeats < 1 or args.rounds < 1:
        p.error("--warmup must be >= 0, --repeats and --rounds >= 1")
    return args


def connect(args):
    import swat

    options = {}
    if args.protocol:
        options["protocol"] = args.protocol
    if args.authinfo:
        options["authinfo"] = args.authinfo
    return swat.CAS(args.host, args.port, args.username, **options)


def check(result, what):
    """Raise PrefixError when a CAS action reports an error."""
    if getattr(result, "severity", 0) > 1:
        messages = [m for m in getattr(result, "messages", []) if m]
        raise PrefixError(f"{what}: " + (messages[-1] if messages else str(result.status)))
    return result


def upload_input(conn, array_file, table, uploaded):
    """The fixed input as a CAS table: one row per batch item, one column per value."""
    if table in uploaded:
        return
    import numpy as np

    batch = np.load(array_file)
    rows = batch.reshape(batch.shape[0], -1)
    path = Path(str(array_file) + ".csv")
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([f"x{i}" for i in range(rows.shape[1])])
        writer.writerows(rows.tolist())
    check(
        conn.upload(str(path), importoptions={"filetype": "csv"},
                    casout={"name": table, "replace": True}),
        "uploading the input",
    )  # fmt: skip
    uploaded.add(table)


def onnx_mapping_for_dlpy():
    """sas-dlpy 1.3 imports `onnx.mapping`, which onnx 1.17 removed; give it the one table it
    reads (NP_TYPE_TO_TENSOR_TYPE) from onnx.helper when this onnx has no such module."""
    import onnx

    if hasattr(onnx, "mapping"):
        return
    import types

    import numpy as np
    from onnx import helper

    class NumpyToTensorType(dict):
        def __missing__(self, dtype):
            return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))

    mapping = types.ModuleType("onnx.mapping")
    mapping.NP_TYPE_TO_TENSOR_TYPE = NumpyToTensorType()
    sys.modules["onnx.mapping"] = mapping
    onnx.mapping = mapping


def substitute(proto, stand_ins):
    """Make the manifest's substitutions (e.g. Clip -> Relu: ReLU6 timed as ReLU)."""
    by_node = {s["node"]: s for s in stand_ins}
    for node in proto.graph.node:
        sub = by_node.get(node.name)
        if sub is not None:
            node.op_type = sub["op"]
            del node.input[sub["inputs"] :]
            del node.attribute[:]
    return proto


def dlpy_layers(cut, name, base=HERE):
    """The cut as DLPy layers (DLPy's ONNX import), its weights written to <name>_weights.
    onnxmodel.h5 in the current directory."""
    import onnx

    onnx_mapping_for_dlpy()
    from dlpy.layers import OutputLayer
    from dlpy.model_conversion.sas_onnx_parse import onnx_to_sas

    sas = cut.get("sas", {})
    proto = substitute(onnx.load(str(Path(base) / cut["file"])), sas.get("stand_ins", []))
    output = None
    if sas.get("output_layer", "identity") == "identity":
        output = OutputLayer(name="output", act="IDENTITY", include_bias=False, full_connect=False)
    try:
        layers = onnx_to_sas(proto, name, output_layer=output)
    except Exception as exc:  # DLPy's importer refuses the model (unsupported op, shape)
        raise PrefixError(f"DLPy cannot import it: {type(exc).__name__}: {exc}") from None
    if output is not None:  # the size DLPy gives its own identity output layer
        size = layers[-2].output_size
        output.config["n"] = size if isinstance(size, int) else size[-1]
    return layers


def import_cut(conn, cut, name, args):
    """Build the cut's model in CAS with DLPy's ONNX importer; load its weights. Returns
    whether it has weights."""
    weights_dir = Path(args.weights_dir)
    weights_dir.mkdir(parents=True, exist_ok=True)
    cwd = os.getcwd()
    os.chdir(weights_dir)  # onnx_to_sas writes <name>_weights.onnxmodel.h5 into the cwd
    try:
        layers = dlpy_layers(cut, name)
    finally:
        os.chdir(cwd)
    weight_file = weights_dir / f"{name}_weights.onnxmodel.h5"
    check(conn.retrieve("deeplearn.buildmodel", _messagelevel="error",
                        model={"name": name, "replace": True}, type="CNN"), "buildModel")  # fmt: skip
    for layer in layers:
        check(conn.retrieve("deeplearn.addlayer", _messagelevel="error", model=name,
                            **layer.to_model_params()), f"addLayer {layer.name}")  # fmt: skip
    weighted = any(layer.type in ("convo", "fc", "batchnorm", "groupconvo") for layer in layers)
    try:
        if weighted:
            check(
                conn.retrieve("deeplearn.dlimportmodelweights", _messagelevel="error",
                              model=name, modelWeights={"name": name + "_weights", "replace": True},
                              formatType="KERAS", weightFilePath=weight_file.name, caslib=CASLIB),
                "dlImportModelWeights",
            )  # fmt: skip
    finally:
        if not args.keep_weights:
            weight_file.unlink(missing_ok=True)
    return weighted


def layer_api_cut(conn, model, sas, name, args, uploaded):
    """Upload the cut's token input and build the cut with DLPy's layer API."""
    sys.path.insert(0, str(HERE))
    import sas_layer_api

    table = cas_name(f"opb_tok_{model['stem']}_{sas['input']['tensor']}")
    sas_layer_api.upload_tokens(conn, sas["input"], HERE, table, uploaded, check)
    weights = HERE / model["sas_layer_api"]["weights"]
    return sas_layer_api.import_cut(conn, sas, name, args, weights, check, CASLIB)


def time_cut(conn, name, table, weighted, args):
    """Elapsed server time (ms) of each timed dlScore call."""
    times = []
    options = {"initWeights": name + "_weights"} if weighted else {}
    for i in range(args.warmup + args.repeats):
        result = check(
            conn.retrieve("deeplearn.dlscore", _messagelevel="error", model=name, table=table,
                          gpu=bool(args.gpu), casout={"name": name + "_scored", "replace": True},
                          **options),
            "dlScore",
        )  # fmt: skip
        elapsed = getattr(getattr(result, "performance", None), "elapsed_time", None)
        if elapsed is None:
            raise PrefixError("dlScore reported no elapsed time")
        if i >= args.warmup:
            times.append(1000.0 * float(elapsed))
    return times


def drop_tables(conn, name):
    """Free what one cut left in CAS (its model, weights and scores)."""
    for table in (name, name + "_weights", name + "_scored"):
        conn.retrieve("table.droptable", _messagelevel="none", name=table, quiet=True)


def cas_name(text):
    """A CAS table or model name: letters, digits and underscores, at most 60 characters."""
    return re.sub(r"[^A-Za-z0-9_]", "_", text)[:60]


def jobs(model):
    """(row name, type, inputs, cut entry, CAS model name, layer status) in the CSV's order:
    each model input's baseline, then one cut per layer in walk order."""
    stem = model["stem"]
    out = []
    for i, base in enumerate(model.get("baselines", [])):
        out.append((base["input"], "input", "", base, cas_name(f"opb_{stem}_in{i}"), None))
    layers = {layer["name"]: layer for layer in model["layers"]}
    rows = {n: layer.get("sas", {}).get("row") or n for n, layer in layers.items()}
    for cut in model["cuts"]:
        layer = layers[cut["layer"]]
        reads = layer.get("sas", {}).get("reads") or layer.get("inputs", [])
        reads = [rows.get(r, r) for r in reads]  # a layer by its row name, an input as it is
        out.append((rows[layer["name"]], layer["op"], " ".join(reads), cut,
                    cas_name(f"opb_{stem}_{cut['cut']:03d}"), layer.get("sas", {})))  # fmt: skip
    return out


def timed_row(row, kind, reads, times, layer_sas):
    """The CSV row of a timed cut (its times in ms)."""
    spread = statistics.stdev(times) if len(times) > 1 else 0.0
    status = "ok"
    if (layer_sas or {}).get("status") == "stand-in":
        status = f"stand-in: {layer_sas['why']}"
    return [row, kind, reads, f"{statistics.median(times):.6f}", f"{spread:.6f}",
            f"{min(times):.6f}", len(times), status]  # fmt: skip


def time_model(conn, model, args, uploaded):
    out = Path(args.out_dir) / f"sas_prefix_{model['stem']}.csv"
    todo = jobs(model)
    not_timed = set()
    columns = COLUMNS + (["round"] if args.rounds > 1 else [])
    with open(out, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns)
        for round_ in range(args.rounds):
            for k, (row, kind, reads, cut, name, layer_sas) in enumerate(todo, start=1):
                tail = [round_] if args.rounds > 1 else []
                what = "baseline" if kind == "input" else "cut"
                started = time.time()
                print(f"[{model['name']} {k}/{len(todo)}{f' round {round_}' if tail else ''}] "
                      f"{what} {row}: ", end="", flush=True)  # fmt: skip
                sas = cut.get("sas", {})
                try:
                    if sas.get("status") == "refused":
                        why = (layer_sas or {}).get("why") or sas["problems"][0]["why"]
                        raise PrefixError(f"not timed: {why}")
                    try:
                        if sas.get("api") == "layers":  # DLPy's layer API (sas_layer_api.py)
                            weighted = layer_api_cut(conn, model, sas, name, args, uploaded)
                            table = cas_name(f"opb_tok_{model['stem']}_{sas['input']['tensor']}")
                        else:
                            table = cas_name(f"opb_in_{model['stem']}_{cut['inputs'][0]['name']}")
                            upload_input(conn, HERE / cut["inputs"][0]["file"], table, uploaded)
                            weighted = import_cut(conn, cut, name, args)
                        times = time_cut(conn, name, table, weighted, args)
                    finally:
                        drop_tables(conn, name)
                except Exception as exc:  # noqa: BLE001 - keep what was measured, go on
                    reason = " ".join(str(exc).split()) or type(exc).__name__
                    if not reason.startswith("not timed"):
                        reason = f"failed: {reason}"
                    not_timed.add(row)
                    fh.write(f"# {what} {k} ({row}): {reason}\r\n")
                    writer.writerow([row, kind, reads, "", "", "", "", reason, *tail])
                    print(reason, flush=True)
                else:
                    writer.writerow([*timed_row(row, kind, reads, times, layer_sas), *tail])
                    print(f"median {statistics.median(times):.3f} ms over {len(times)} runs "
                          f"({time.time() - started:.1f} s)", flush=True)  # fmt: skip
                fh.flush()
    return out, len(not_timed)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    manifest = json.loads((HERE / "manifest.json").read_text())
    models = [m for m in manifest["models"] if not args.model or m["name"] in args.model]
    if not models:
        print(f"error: no model {args.model} in the manifest", file=sys.stderr)
        return 2
    if "cuts" not in models[0]:
        print("error: manifest.json is from an older opbench export: export again", file=sys.stderr)
        return 2
    try:
        conn = connect(args)
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback
        print(f"error: cannot connect to CAS at {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    conn.loadactionset("deeplearn", _messagelevel="error")
    server_dir = args.server_weights_dir or str(Path(args.weights_dir).resolve())
    conn.retrieve("table.addcaslib", _messagelevel="error", name=CASLIB, path=server_dir,
                  dataSource={"srcType": "path"}, activeOnAdd=False, subdirectories=False)  # fmt: skip
    uploaded = set()
    written = []
    for model in models:
        out, missing = time_model(conn, model, args, uploaded)
        written.append((model["name"], out, missing))
    conn.close()
    for name, out, missing in written:
        note = f" ({missing} cut(s) not timed: see the status column)" if missing else ""
        print(f"wrote {out}{note}")
        print(f"next (on the machine with your opbench run of suite {manifest['suite']!r}):")
        print(f"  opbench compare --reference {out} --model '{name}'")
    return 1 if any(missing for _n, _o, missing in written) else 0


if __name__ == "__main__":
    sys.exit(main())
