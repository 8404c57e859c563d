"""Time a suite's models in SAS Viya, cut after each layer, and write opbench's sas-prefix CSV.

Written by `opbench export sas`; run it where SAS Viya is reachable, from the export folder
(it reads manifest.json and the ONNX files beside it). It needs Python 3.8+, numpy, onnx,
swat, sas-dlpy and h5py; it does not need opbench.

    python time_sas_prefixes.py --host cas.example.com --port 5570 \\
        --server-weights-dir /shared/opbench_weights --weights-dir /mnt/shared/opbench_weights

Connection: --host/--port, else CASHOST/CASPORT; --protocol, else CASPROTOCOL (swat's default
otherwise). Credentials: --username with the password from ~/.authinfo (or --authinfo FILE),
as swat reads them; nothing is written to any file. Each prefix model is converted by DLPy's
ONNX importer (dlpy.model_conversion.sas_onnx_parse.onnx_to_sas, what Model.from_onnx_model
uses), built with deeplearn.buildModel/addLayer, its weights loaded with
deeplearn.dlImportModelWeights from the HDF5 file the importer writes (which the CAS server
must see: --weights-dir here is --server-weights-dir there), then scored on the fixed input
batch with deeplearn.dlScore: --warmup calls, then --repeats timed calls. The time of a call
is the elapsed time the CAS server reports for that action (CASResults.performance).

Output, one CSV per model (opbench's `sas-prefix` format): layer, type, prefix_median_ms,
prefix_std_ms, prefix_min_ms, runs; the file is written row by row as prefixes finish. A
prefix that fails is written as a comment line with its error (`# cut 3 after relu1 failed:
…`), the rows already measured stay, and the next prefix is tried. The next measured row then
covers the failed layers too, and says so in its name (`relu1 + pool1`), which opbench
matches to both layers.
"""

import argparse
import csv
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASLIB = "OPBENCHW"
COLUMNS = ["layer", "type", "prefix_median_ms", "prefix_std_ms", "prefix_min_ms", "runs"]


class PrefixError(Exception):
    """This prefix cannot be timed; the message says why."""


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", help="CAS host (default: $CASHOST)")
    p.add_argument("--port", type=int, help="CAS port (default: $CASPORT)")
    p.add_argument("--protocol", help="cas, http or https (default: $CASPROTOCOL, else swat's)")
    p.add_argument("--username", help="user name; the password comes from the authinfo file")
    p.add_argument("--authinfo", help="authinfo file (default: swat's, ~/.authinfo)")
    p.add_argument("--warmup", type=int, default=2, help="untimed scoring calls per prefix")
    p.add_argument("--repeats", type=int, default=10, help="timed scoring calls per prefix")
    p.add_argument("--weights-dir", default=str(HERE / "sas_weights"),
                   help="where DLPy writes the HDF5 weights (client side)")  # fmt: skip
    p.add_argument("--server-weights-dir",
                   help="the same directory as the CAS server sees it (default: --weights-dir)")  # fmt: skip
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
    if args.warmup < 0 or args.repeats < 1:
        p.error("--warmup must be >= 0 and --repeats >= 1")
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


def import_prefix(conn, prefix, name, args):
    """Build the prefix model in CAS with DLPy's ONNX importer; load its weights."""
    import onnx

    onnx_mapping_for_dlpy()
    from dlpy.model_conversion.sas_onnx_parse import onnx_to_sas

    if len(prefix["inputs"]) != 1:
        raise PrefixError(
            f"this cut has {len(prefix['inputs'])} inputs; DLPy imports single-input models only"
        )
    weights_dir = Path(args.weights_dir)
    weights_dir.mkdir(parents=True, exist_ok=True)
    cwd = os.getcwd()
    os.chdir(weights_dir)  # onnx_to_sas writes <name>_weights.onnxmodel.h5 into the cwd
    try:
        layers = onnx_to_sas(onnx.load(str(HERE / prefix["file"])), name)
    except Exception as exc:  # DLPy's importer refuses the model (unsupported op, shape)
        raise PrefixError(f"DLPy cannot import it: {type(exc).__name__}: {exc}") from None
    finally:
        os.chdir(cwd)
    check(conn.retrieve("deeplearn.buildmodel", _messagelevel="error",
                        model={"name": name, "replace": True}, type="CNN"), "buildModel")  # fmt: skip
    for layer in layers:
        check(conn.retrieve("deeplearn.addlayer", _messagelevel="error", model=name,
                            **layer.to_model_params()), f"addLayer {layer.name}")  # fmt: skip
    check(
        conn.retrieve("deeplearn.dlimportmodelweights", _messagelevel="error", model=name,
                      modelWeights={"name": name + "_weights", "replace": True},
                      formatType="KERAS", weightFilePath=f"{name}_weights.onnxmodel.h5",
                      caslib=CASLIB),
        "dlImportModelWeights",
    )  # fmt: skip


def time_prefix(conn, name, table, args):
    """Elapsed server time (ms) of each timed dlScore call."""
    times = []
    for i in range(args.warmup + args.repeats):
        result = check(
            conn.retrieve("deeplearn.dlscore", _messagelevel="error", model=name,
                          initWeights=name + "_weights", table=table, gpu=bool(args.gpu),
                          casout={"name": name + "_scored", "replace": True}),
            "dlScore",
        )  # fmt: skip
        elapsed = getattr(getattr(result, "performance", None), "elapsed_time", None)
        if elapsed is None:
            raise PrefixError("dlScore reported no elapsed time")
        if i >= args.warmup:
            times.append(1000.0 * float(elapsed))
    return times


def time_model(conn, model, args, uploaded):
    out = Path(args.out_dir) / f"sas_prefix_{model['stem']}.csv"
    types = {layer["name"]: layer["op"] for layer in model["layers"]}
    failed = 0
    pending = []  # layers of failed cuts: the next measured difference covers them too
    with open(out, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(COLUMNS)
        for prefix in model["prefixes"]:
            k, layer, n = prefix["cut"], prefix["layer"], len(model["prefixes"])
            name = f"opb_{model['stem']}_{k:02d}"[:60]
            started = time.time()
            print(f"[{model['name']} {k}/{n}] cut after {layer}: ", end="", flush=True)
            try:
                table = f"opb_in_{model['stem']}"[:60]
                upload_input(conn, HERE / prefix["inputs"][0]["file"], table, uploaded)
                import_prefix(conn, prefix, name, args)
                times = time_prefix(conn, name, table, args)
            except Exception as exc:  # noqa: BLE001 - keep what was measured, go on
                failed += 1
                pending.append(layer)
                reason = " ".join(str(exc).split()) or type(exc).__name__
                fh.write(f"# cut {k} after {layer} failed: {reason}\r\n")
                print(f"FAILED: {reason}", flush=True)
            else:
                covered = [*pending, layer]
                pending = []
                spread = statistics.stdev(times) if len(times) > 1 else 0.0
                writer.writerow([" + ".join(covered), " + ".join(types[c] for c in covered),
                                 f"{statistics.median(times):.6f}", f"{spread:.6f}",
                                 f"{min(times):.6f}", len(times)])  # fmt: skip
                print(f"median {statistics.median(times):.3f} ms over {len(times)} runs "
                      f"({time.time() - started:.1f} s)", flush=True)  # fmt: skip
            fh.flush()
    return out, failed


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    manifest = json.loads((HERE / "manifest.json").read_text())
    models = [m for m in manifest["models"] if not args.model or m["name"] in args.model]
    if not models:
        print(f"error: no model {args.model} in the manifest", file=sys.stderr)
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
        out, failed = time_model(conn, model, args, uploaded)
        written.append((model["name"], out, failed))
    conn.close()
    for name, out, failed in written:
        note = f" ({failed} cut(s) failed: see the # lines)" if failed else ""
        print(f"wrote {out}{note}")
        print(f"next (on the machine with your opbench run of suite {manifest['suite']!r}):")
        print(f"  opbench compare --reference {out} --model '{name}'")
    return 1 if any(failed for _n, _o, failed in written) else 0


if __name__ == "__main__":
    sys.exit(main())
