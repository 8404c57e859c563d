"""Shared by the plugin tests: the CLI, small files, and a plugin a user writes in a few lines."""

from __future__ import annotations

import textwrap
from pathlib import Path

from typer.testing import CliRunner

from opbench.cli.main import app


def invoke(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


# A backend for the built-in relu op, in torch: what a user writes in a few lines.
CLAMP_BACKEND = """
    from opbench.api import Backend


    class Clamp(Backend):
        name = "clamp"

        def supports(self, layer):
            return None if layer.op == "relu" else f"clamp runs relu only, not {layer.op}"

        def build(self, layer, weights, device):
            import torch

            return lambda x: torch.clamp_min(x, 0)
"""


def suite_text(backends: str = "[torch, triton, clamp]", plugins: str = "") -> str:
    return f"""
        name: plug
        {plugins}
        models:
          - name: m
            input: [8, 32]
            backends: {backends}
            layers:
              - {{name: act, op: relu}}
              - {{name: soft, op: softmax}}
        """
