"""The one rich Console every command prints through, and the error edge of the CLI."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import typer
from rich.console import Console

from opbench.errors import OpbenchError

# Logs (CI, pipes) get a wide fixed width so tables do not fold into unreadable columns.
_width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160
console = Console(highlight=False, width=_width)
err_console = Console(stderr=True, highlight=False, width=_width)

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, exit_code: int) -> typer.Exit:
    """Print one clear error line and return the Exit to raise."""
    err_console.print(f"[bold red]error:[/] {message}", markup=True, soft_wrap=True)
    return typer.Exit(exit_code)


def handles_errors(func: F) -> F:
    """Turn OpbenchError (errors as values up to here) into one line and its exit code."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except OpbenchError as exc:
            err_console.print("error: ", style="bold red", end="")
            err_console.print(str(exc), markup=False, soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            err_console.print("interrupted", style="bold yellow")
            sys.exit(130)

    return wrapper  # type: ignore[return-value]
