"""Errors are values until the CLI edge; these are the ones that reach it.

Each carries enough location to print one line a user can act on, and the
exit code the CLI should return.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class ExitCode:
    OK = 0
    FAILED_GATE = 1
    BAD_INPUT = 2
    LAYER_ERROR = 3
    BASELINE = 4


@dataclass
class Location:
    """Where in an input file a problem sits. Every field is optional."""

    file: str | None = None
    line: int | None = None
    column: int | None = None
    model: str | None = None
    layer: str | None = None
    field: str | None = None

    def __str__(self) -> str:
        parts: list[str] = []
        if self.file:
            where = self.file
            if self.line is not None:
                where += f":{self.line}"
                if self.column is not None:
                    where += f":{self.column}"
            parts.append(where)
        for label, value in (("model", self.model), ("layer", self.layer), ("field", self.field)):
            if value:
                parts.append(f"{label} {value!r}")
        return ", ".join(parts)


@dataclass
class OpbenchError(Exception):
    """A problem reported to the user as one line, with an exit code."""

    message: str
    location: Location = field(default_factory=Location)
    exit_code: int = ExitCode.BAD_INPUT

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def __str__(self) -> str:
        where = str(self.location)
        return f"{where}: {self.message}" if where else self.message


class InputError(OpbenchError):
    """Bad input found before any GPU work: exit 2."""


class Unsupported(Exception):
    """No implementation for this layer: raised by a kernel's prepare function (or a backend, or
    an op that never runs) when it cannot run a configuration.

    A backend turns it into an `unsupported` result carrying this reason; nothing else ever
    runs the layer in its place. It lives here, below ops and kernels, so that both raise it
    without importing each other.
    """


class NodeRefused(ValueError):
    """An ONNX node that is not a suite layer as it stands (asymmetric pads, a softmax over the
    batch, ...): raised by an op reading the node (`Op.read_onnx`) and by the importer's
    placing of it; the importer lists the node as unsupported with this one-line reason."""
