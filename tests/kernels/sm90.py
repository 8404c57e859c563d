"""Helpers of the CPU sm_90 compile tests (Gluon attention kernels, inline-PTX unpack): Gluon
and inline PTX do not run in Triton's interpreter, so these tests compile for sm_90 on this
machine with the ptxas and cuobjdump of Triton's package (no GPU needed) and check the result.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import triton

BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
ROOT = Path(__file__).parents[2]
# The Triton release of the GPU machine, where the Gluon kernels' register splits were measured.
MEASURED_TRITON = "3.6."


# The uninterpreted Python that runs the compile scripts: one process for the whole test run,
# started at the first script. Importing torch, Triton's Gluon and opbench's kernels costs about
# as much CPU as one compile, and 48 compile tests paid it once each.
_SERVER = r"""
import contextlib, io, json, sys, traceback
reply = sys.stdout
for line in sys.stdin:
    job = json.loads(line)
    out, ok = io.StringIO(), True
    sys.argv = ["-c", *job["argv"]]
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(job["script"], "<sm90 script>", "exec"), {"__name__": "__main__"})
    except BaseException:
        ok = False
        out.write(traceback.format_exc())
    reply.write("sm90-reply " + json.dumps({"ok": ok, "out": out.getvalue()}) + "\n")
    reply.flush()
"""
_server: subprocess.Popen | None = None
_REPLY = "sm90-reply "  # what starts the server's answer (a compiler may print lines of its own)


def _start_server() -> subprocess.Popen:
    env = {**os.environ, "TRITON_INTERPRET": "0",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    server = subprocess.Popen([sys.executable, "-u", "-c", _SERVER], env=env, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    atexit.register(_stop, server)
    return server


def _stop(server: subprocess.Popen) -> None:
    """End of the test run: the server's loop ends at end of input; waited for, so that no
    process is left behind (and its CPU time counts in the run's)."""
    server.stdin.close()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def run_uninterpreted(script: str, *argv: object) -> str:
    """`script` run with TRITON_INTERPRET=0 (the test run has the interpreter on, and under it
    gluon.jit helpers become interpreted functions that the compiler cannot call), in the one
    uninterpreted process of this test run, with `argv` as its sys.argv[1:]; its stdout. A
    failure fails the test with the script's traceback."""
    global _server
    if _server is None or _server.poll() is not None:
        _server = _start_server()
    _server.stdin.write(json.dumps({"script": script, "argv": [str(a) for a in argv]}) + "\n")
    _server.stdin.flush()
    printed = []
    while not (line := _server.stdout.readline()).startswith(_REPLY):
        if not line:  # the process died (a crash in the compiler): the next script gets a new one
            _server = None
            raise AssertionError("the sm_90 compile process died (its stderr is the test's):\n"
                                 + "".join(printed))  # fmt: skip
        printed.append(line)
    done = json.loads(line[len(_REPLY) :])
    if not done["ok"]:
        raise AssertionError(f"the sm_90 compile failed:\n{done['out']}")
    return done["out"]


def ptxas_report(ptx: Path, cubin: Path) -> str:
    """ptxas -v's report on the PTX, from the ptxas of Triton's package that reads its PTX
    version: Triton 3.6 ships one; newer releases write PTX that only their `ptxas-blackwell`
    (a newer CUDA) reads, and compile with it."""
    failures = []
    for name in ("ptxas", "ptxas-blackwell"):
        if not (BIN / name).exists():
            continue
        run = subprocess.run([BIN / name, "-arch=sm_90a", "-v", ptx, "-o", cubin],
                             capture_output=True, text=True)  # fmt: skip
        if run.returncode == 0:
            return run.stderr
        failures.append(f"{name}: {run.stderr.strip()}")
    raise AssertionError(
        "no ptxas of Triton's package assembles the kernel:\n" + "\n".join(failures)
    )


def dump_sass(cubin: Path) -> str:
    """The SASS of a cubin, by Triton's cuobjdump (once per file as written: the tests read a
    cubin's SASS twice, whole and as events)."""
    written = Path(cubin).stat()
    return _sass(str(cubin), written.st_mtime_ns, written.st_size)


@functools.lru_cache(maxsize=4)
def _sass(cubin: str, mtime_ns: int, size: int) -> str:
    return subprocess.run([BIN / "cuobjdump", "--dump-sass", cubin], capture_output=True,
                          text=True, check=True).stdout  # fmt: skip


def no_spills_where_measured(info: str) -> None:
    """ptxas's report `info` shows no spills; else a failure under the Triton release the
    kernels were measured with (3.6), an expected failure naming the spill bytes under another.
    The register splits were measured spill-free with the GPU machine's Triton (3.6); Triton
    3.9's allocator spills a few of them (the fp8 D 64 attention kernels, 184 bytes; the
    ping-pong GEMM tiles, 4-8 bytes; seen 2026-11-25). A spill costs speed, not correctness;
    the tuner times such a tile like any other."""
    if re.search(r"0 bytes spill stores, 0 bytes spill loads", info):
        return
    if triton.__version__.startswith(MEASURED_TRITON):
        raise AssertionError(info)
    pytest.xfail(
        f"spills under Triton {triton.__version__} (spill-free under "
        f"{MEASURED_TRITON}, where it was measured): "
        + "; ".join(re.findall(r"\d+ bytes spill \w+", info))
    )
