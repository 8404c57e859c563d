"""report.html opened in headless Chromium: it loads with no console error and shows the
layer table and every plot (the roofline and the model chart among them), decoded (not a
broken image); NOT-MEASURED rows are marked; clicking a header sorts the table.

Talks to Chromium over --remote-debugging-pipe (fd 3 in, fd 4 out, NUL-separated JSON
messages of the DevTools protocol). Skipped only when no Chromium is installed.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from opbench.compare.compare import compare_run
from opbench.reference.model import ReferenceProfile, ReferenceTiming
from opbench.report.files import write_reports
from opbench.report.plots import PLOT_NAMES
from opbench.results.model import Correctness, LayerResult, RunResult

CHROMIUM = next(
    (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)),
    None,
)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no Chromium installed (Debian: apt-get install -y chromium); .ci/run installs it",
)

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--remote-debugging-pipe",
]


class Browser:
    """Just enough of the DevTools protocol to load a page and read what happened."""

    def __init__(self, profile_dir: Path) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # move the child's ends to high numbers so that dup2 onto 3 and 4 cannot clobber them
        child_in = os.dup(to_chrome_r) if to_chrome_r > 4 else _high_dup(to_chrome_r)
        child_out = os.dup(from_chrome_w) if from_chrome_w > 4 else _high_dup(from_chrome_w)

        def wire() -> None:
            os.dup2(child_in, 3)
            os.dup2(child_out, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile_dir}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(3, 4, child_in, child_out),
            preexec_fn=wire,
        )
        for fd in (to_chrome_r, from_chrome_w, child_in, child_out):
            os.close(fd)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    def send(
        self,
        method: str,
        params: dict | None = None,
        session: str | None = None,
        timeout: float = 30,
    ) -> dict:
        self._next_id += 1
        message: dict = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read(timeout)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 30) -> dict:
        for event in self.events:
            if event.get("method") == method:
                return event
        while True:
            event = self._read(timeout)
            self.events.append(event)
            if event.get("method") == method:
                return event

    def drain(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                self.events.append(self._read(max(end - time.monotonic(), 0.01)))
            except TimeoutError:
                return

    def _read(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_chrome], [], [], left)[0]:
                raise TimeoutError("no message from Chromium")
            chunk = os.read(self._from_chrome, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed the debugging pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)


def _high_dup(fd: int) -> int:
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD, 10)


def _comparison():
    ok = Correctness(rel_l2=1e-6, max_abs=1e-6, nonfinite=0, tolerance=1e-4)

    def result(layer: str, ms: float, backend: str) -> LayerResult:
        return LayerResult(
            interpreted=layer == "slow_interp",
            model="mlp",
            layer=layer,
            op="linear",
            backend=backend,
            status="ok",
            dtype="float16",
            input_shape=(4, 8),
            output_shape=(4, 8),
            samples_ms=(tuple(ms * (1 + 0.01 * (i % 5)) for i in range(20)),),
            correctness=ok,
            flops=10**9,
            bytes=10**7,
        )

    names = ["<script>alert('x')</script>", "fc1", "fc2", "slow_interp"]
    run = RunResult(
        suite="browser",
        started_at="2026-11-22T00:00:00Z",
        device="cuda",
        complete=True,
        layers=tuple(
            result(n, 0.1 * (i + 1), b) for i, n in enumerate(names) for b in ("triton", "torch")
        ),
    )
    rows = tuple(
        ReferenceTiming(
            engine="onnxruntime", source="ref.json", index=i, name=f"/{n}/MatMul", median_ms=0.3
        )
        for i, n in enumerate(names)
    )
    return compare_run(
        run, ReferenceProfile("onnxruntime", "ref.json", "onnxruntime", rows), run_label="run"
    )


def test_report_html_loads_cleanly_in_chromium(tmp_path: Path):
    write_reports(_comparison(), tmp_path / "out")
    page = (tmp_path / "out" / "report.html").resolve()
    browser = Browser(tmp_path / "profile")
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        for domain in ("Runtime", "Log", "Page"):
            browser.send(f"{domain}.enable", session=session)
        browser.send("Page.navigate", {"url": page.as_uri()}, session=session)
        browser.wait_for("Page.loadEventFired")
        browser.drain(0.5)
        probe = (
            "JSON.stringify({"
            "rows: document.querySelectorAll('#layers tr').length,"
            "images: Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight]),"
            "figures: Array.from(document.querySelectorAll('figure')).map(f => f.id),"
            "scripts: Array.from(document.scripts).map(s => s.textContent.includes('alert')),"
            "title: document.title,"
            "cell: document.querySelector('#layers tbody tr td').textContent,"
            "greyed: Array.from(document.querySelectorAll('#layers tr.not-measured')).map("
            " r => [r.cells[0].textContent, r.querySelector('td.verdict').textContent,"
            " getComputedStyle(r.cells[0]).color])"
            "})"
        )

        def evaluate(expression: str):
            value = browser.send(
                "Runtime.evaluate",
                {"expression": expression, "returnByValue": True},
                session=session,
            )
            return value["result"]["value"]

        seen = json.loads(evaluate(probe))
        # sort by the triton time column: click once (ascending), again (descending)
        order = (
            "(() => { const heads = Array.from(document.querySelectorAll('#layers th'));"
            " heads.find(h => h.textContent.trim() === 'triton ms').click();"
            " const up = Array.from(document.querySelectorAll('#layers tbody tr')).map(r => r.cells[0].textContent);"
            " heads.find(h => h.textContent.trim() === 'triton ms').click();"
            " const down = Array.from(document.querySelectorAll('#layers tbody tr')).map(r => r.cells[0].textContent);"
            " return JSON.stringify([up, down]); })()"
        )
        ascending, descending = json.loads(evaluate(order))
    finally:
        browser.close()

    errors = [
        e
        for e in browser.events
        if e.get("method") in ("Runtime.exceptionThrown",)
        or (
            e.get("method") == "Runtime.consoleAPICalled"
            and e["params"].get("type") in ("error", "assert")
        )
        or (e.get("method") == "Log.entryAdded" and e["params"]["entry"].get("level") == "error")
    ]
    assert not errors, errors
    assert seen["rows"] == 1 + 4  # header + one row per layer
    assert seen["figures"] == [f"plot-{name}" for name in PLOT_NAMES]
    assert "plot-roofline" in seen["figures"] and "plot-models" in seen["figures"]
    assert len(seen["images"]) == len(PLOT_NAMES)
    assert all(complete and w > 100 and h > 100 for complete, w, h in seen["images"]), seen[
        "images"
    ]
    assert seen["scripts"] == [False]  # only the sorter: the layer named <script> stayed text
    assert seen["cell"] == "<script>alert('x')</script>"
    assert seen["greyed"] == [["slow_interp", "NOT-MEASURED", "rgb(136, 136, 136)"]]
    # the layers' times grow with their position: 0.1, 0.2, 0.3, 0.4 ms
    names = ["<script>alert('x')</script>", "fc1", "fc2", "slow_interp"]
    assert ascending == names and descending == names[::-1]
