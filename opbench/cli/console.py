"""The one rich Console every command prints through, and the error edge of the CLI.

Standard output may be a pipe that closes early (`opbench compare … | head -1`). A closed
pipe is no verdict: what the command prints after that point is dropped, its files are still
written and its exit code is still the one its verdicts give.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import typer
from rich.console import Console

from opbench.errors import OpbenchError


class _Stdout:
    """Whatever sys.stdout is when something is written (test runners swap it), with a closed
    pipe swallowed: the first BrokenPipeError points file descriptor 1 at /dev/null (so that
    the interpreter's last flush at exit cannot fail either) and later writes are dropped."""

    def __init__(self) -> None:
        self.pipe_closed = False

    def write(self, text: str) -> int:
        if not self.pipe_closed:
            try:
                return sys.stdout.write(text)
            except BrokenPipeError:
                self._close()
        return len(text)

    def flush(self) -> None:
        if not self.pipe_closed:
            try:
                sys.stdout.flush()
            except BrokenPipeError:
                self._close()

    def isatty(self) -> bool:
        try:
            return sys.stdout.isatty()
        except (AttributeError, ValueError):
            return False

    def __getattr__(self, name: str) -> Any:
        return getattr(sys.stdout, name)

    def _close(self) -> None:
        self.pipe_closed = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (AttributeError, OSError, ValueError):
            pass  # a stdout with no file descriptor (a test runner's buffer): nothing to flush


stdout = _Stdout()

# Logs (CI, pipes) get a wide fixed width so tables do not fold into unreadable columns.
_width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160
console = Console(file=stdout, highlight=False, width=_width)  # type: ignore[arg-type]
err_console = Console(stderr=True, highlight=False, width=_width)

F = TypeVar("F", bound=Callable[..., Any])


def write_line(line: str) -> None:
    """One physical line on stdout, never through rich's wrapping (CI workflow commands)."""
    stdout.write(line + "\n")
    stdout.flush()


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
