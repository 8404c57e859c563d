"""`--plugin PATH_OR_MODULE`, shared by run, compare, validate and list."""

from __future__ import annotations

from collections.abc import Sequence

import typer


def plugin_option() -> list[str]:
    return typer.Option(
        [],
        "--plugin",
        metavar="PATH_OR_MODULE",
        help="Load backends and ops from this file or module (repeatable; docs/plugins.md).",
    )


def load_plugins(specs: Sequence[str]) -> None:
    """Installed entry points, then each --plugin; a failure is one line and exit 2."""
    from opbench.plugins import activate

    activate(specs)
