"""Every report file of a comparison, written all or nothing.

Everything is rendered in memory first, written into a temporary folder beside the target,
then each file is moved into place with an atomic rename. A failure before the moves leaves
the target folder exactly as it was.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from opbench.compare.model import Comparison
from opbench.report.csvjson import (
    CSV_FILE,
    E2E_CSV_FILE,
    JSON_FILE,
    comparison_csv,
    comparison_json,
    end_to_end_csv,
)
from opbench.report.html import render_html
from opbench.report.markdown import render_markdown
from opbench.report.plots import render_plots

MARKDOWN_FILE = "report.md"
HTML_FILE = "report.html"


def render_reports(comparison: Comparison, *, with_json: bool = True) -> dict[str, bytes]:
    """file name -> content, for every report file."""
    plots = render_plots(comparison)
    files: dict[str, bytes] = {}
    if with_json:
        files[JSON_FILE] = comparison_json(comparison).encode("utf-8")
    files[CSV_FILE] = comparison_csv(comparison).encode("utf-8")
    files[E2E_CSV_FILE] = end_to_end_csv(comparison).encode("utf-8")
    files[MARKDOWN_FILE] = render_markdown(comparison).encode("utf-8")
    files[HTML_FILE] = render_html(comparison, plots).encode("utf-8")
    for plot in plots:
        files[f"{plot.name}.png"] = plot.png
        files[f"{plot.name}.svg"] = plot.svg
    return files


def write_reports(comparison: Comparison, out_dir: Path, *, with_json: bool = True) -> list[Path]:
    """Render and write every report file into out_dir; returns the paths written.

    with_json=False re-renders from an existing comparison.json without rewriting it."""
    files = render_reports(comparison, with_json=with_json)
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".opbench-report-", dir=out_dir))
    try:
        for name, content in files.items():
            (staging / name).write_bytes(content)
        written = []
        for name in files:
            os.replace(staging / name, out_dir / name)
            written.append(out_dir / name)
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)
