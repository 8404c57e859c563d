"""The environment fingerprint saved with every run: what ran, where, and on which code."""

from __future__ import annotations

import hashlib
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import opbench

PACKAGE_DIR = Path(opbench.__file__).resolve().parent


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, cwd=cwd, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def kernel_version() -> str:
    """A hash of the kernel sources: the gate treats a change here as a new code version."""
    digest = hashlib.sha256()
    root = PACKAGE_DIR / "kernels"
    for path in sorted(root.rglob("*.py")):  # the family folders too
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def git_commit() -> str | None:
    commit = _run(["git", "rev-parse", "HEAD"], cwd=PACKAGE_DIR)
    if commit and _run(["git", "status", "--porcelain", "--", str(PACKAGE_DIR)], cwd=PACKAGE_DIR):
        commit += "+dirty"
    return commit


def gpu_clocks(index: int = 0) -> dict[str, Any] | None:
    out = _run(
        [
            "nvidia-smi",
            f"--id={index}",
            "--query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw",
            "--format=csv,noheader,nounits",
        ]
    )
    if not out:
        return None
    parts = [p.strip() for p in out.splitlines()[0].split(",")]
    keys = ("sm_mhz", "mem_mhz", "temperature_c", "power_w")
    clocks: dict[str, Any] = {}
    for key, value in zip(keys, parts, strict=False):
        try:
            clocks[key] = float(value)
        except ValueError:
            clocks[key] = value
    return clocks


# OPBENCH_* variables that change only how a run is shown, never what runs or what it measures.
DISPLAY_ONLY_VARS = frozenset({"OPBENCH_PROGRESS"})


def opbench_vars(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every OPBENCH_* variable set, but the display-only ones: switches such as
    OPBENCH_TEST_SLOW_LAYERNORM, OPBENCH_CONV_FAST_LAUNCH or OPBENCH_CACHE_DIR (tuned plans)
    change the kernels that run. Listing all by default, a new switch is recorded too."""
    env = os.environ if environ is None else environ
    return {
        name: value
        for name, value in sorted(env.items())
        if name.startswith("OPBENCH_") and name not in DISPLAY_ONLY_VARS
    }


def fingerprint(device: str) -> dict[str, Any]:
    env: dict[str, Any] = {
        "opbench": opbench.__version__,
        "kernel_version": kernel_version(),
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "device": device,
        "opbench_vars": opbench_vars(),
    }
    try:
        import torch

        env["torch"] = torch.__version__
        env["cuda"] = torch.version.cuda
    except Exception as exc:  # pragma: no cover - torch is a dependency
        env["torch"] = f"unavailable: {exc}"
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception as exc:
        env["triton"] = f"unavailable: {type(exc).__name__}"
    if device.startswith("cuda"):
        import torch

        index = torch.device(device).index or 0
        props = torch.cuda.get_device_properties(index)
        env["gpu_name"] = props.name
        env["gpu_uuid"] = str(getattr(props, "uuid", "")) or None
        env["gpu_count"] = torch.cuda.device_count()
        env["sm_count"] = props.multi_processor_count
        env["gpu_memory_gb"] = round(props.total_memory / 1e9, 1)
        env["driver"] = _run(
            ["nvidia-smi", f"--id={index}", "--query-gpu=driver_version", "--format=csv,noheader"]
        )
        env["clocks_start"] = gpu_clocks(index)
    else:
        env["gpu_name"] = None
        env["driver"] = None
        env["cpu"] = platform.processor() or platform.machine()
        env["cpu_count"] = __import__("os").cpu_count()
    env.update(host_cpu())
    env["argv"] = sys.argv[1:]
    return env


def cpu_model() -> str:
    """The CPU's marketing name (Linux /proc/cpuinfo), else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_cpu() -> dict[str, Any]:
    """The host CPU as the timer sees it: host_ms on a GPU and every CPU time depend on it."""
    import os

    from opbench.measure.timer_cpu import usable_cores

    info: dict[str, Any] = {"cpu_model": cpu_model(), "cores": usable_cores()}
    try:
        import torch

        info["threads"] = torch.get_num_threads()
    except Exception:  # pragma: no cover - torch is a dependency
        info["threads"] = None
    try:
        info["loadavg"] = [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        info["loadavg"] = None
    return info
