"""ResNet-50 through `opbench export sas` and the generated script, against the stand-in CAS
server of the tests (real swat and sas-dlpy, canned times): how long each step takes on
this machine, whether every cut is built, and whether the reader gives every layer its time.

    python bench/sas_standin_resnet50.py [OUT_DIR]

The stand-in answers each cut with 0.4 ms plus the known times of its layers (0.1–0.7 ms
each): the times say nothing about SAS, only that the chain export → script → reader holds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opbench.reference.interface import ReaderOptions  # noqa: E402
from opbench.reference.sas_prefix import READER  # noqa: E402
from tests.unit.export.cas_standin import StandIn, serve  # noqa: E402


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path(tempfile.mkdtemp()) / "r50"
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "opbench", "export", "sas",
                    str(ROOT / "tests/data/suites/resnet50.yaml"), "--out", str(out)],
                   check=True, capture_output=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))  # fmt: skip
    exported = time.perf_counter() - started
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    (model,) = json.loads((out / "manifest.json").read_text())["models"]
    truth = {layer["name"]: 0.1 + 0.1 * (i % 7) for i, layer in enumerate(model["layers"])}
    canned = {"opb_resnet50_in0": 0.4}
    for cut in model["cuts"]:
        canned[f"opb_resnet50_{cut['cut']:03d}"] = 0.4 + sum(truth[m] for m in cut["members"])
    standin = StandIn(lambda name, call: canned[name] + 0.01 * (call % 3))
    server, port = serve(standin)
    home = Path(tempfile.mkdtemp())
    (home / ".authinfo").write_text("host 127.0.0.1 user u password p\n")
    (home / ".authinfo").chmod(0o600)
    env = dict(os.environ, HOME=str(home), CASHOST="127.0.0.1", CASPORT=str(port),
               CASPROTOCOL="http")  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run([sys.executable, str(out / "time_sas_prefixes.py"), "--username", "u",
                           "--warmup", "1", "--repeats", "3"], env=env, capture_output=True,
                          text=True)  # fmt: skip
    scripted = time.perf_counter() - started
    server.shutdown()
    built = sum(c.action == "deeplearn.buildmodel" for c in standin.calls)
    profile = READER.read(out / "sas_prefix_resnet50.csv", ReaderOptions())
    rows = {t.name: t.time_ms for t in profile.layers if t.status == "timed"}
    wrong = [n for n, t in truth.items() if n not in rows or abs(rows[n] - t) > 1e-6]
    print(f"export: {exported:.1f} s, {size / 1e6:.1f} MB ({model['weights_bytes'] / 1e6:.1f} MB "
          f"weights); script: exit {done.returncode}, {scripted:.1f} s, {built} models built; "
          f"reader: {len(rows)} layer rows, {len(wrong)} wrong")  # fmt: skip
    return 0 if done.returncode == 0 and not wrong else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
