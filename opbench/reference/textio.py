"""Opening reference files: encodings, gzip, size limits, and errors that point at a place.

Every reader goes through these helpers so that all formats accept the same files
(UTF-8 with or without BOM, UTF-16 with BOM, Windows-1252 as a fallback, gzip-compressed)
and report problems the same way: `InputError` with file, line and column.
"""

from __future__ import annotations

import codecs
import gzip
import io
from pathlib import Path
from typing import TextIO

from opbench.errors import InputError, Location
from opbench.reference import interface

GZIP_MAGIC = b"\x1f\x8b"

HEAD_BYTES = 64 * 1024


def fail(
    path: Path | str,
    message: str,
    line: int | None = None,
    column: int | None = None,
    *,
    layer: str | None = None,
    field: str | None = None,
) -> InputError:
    """The error to raise for a problem at a place in `path` (callers write `raise fail(...)`)."""
    return InputError(
        message, Location(file=str(path), line=line, column=column, layer=layer, field=field)
    )


def check_file(path: Path) -> None:
    """Refuse a missing path, a directory, or an empty file before any reader looks at it."""
    if not path.exists():
        raise fail(path, "no such file")
    if not path.is_file():
        raise fail(path, "not a file")
    if path.stat().st_size == 0:
        raise fail(path, "the file is empty")


def _is_gzip(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(2) == GZIP_MAGIC


def _open_binary(path: Path) -> io.BufferedIOBase:
    return gzip.open(path, "rb") if _is_gzip(path) else path.open("rb")  # type: ignore[return-value]


def _encoding_of(start: bytes) -> str:
    """The text encoding of a file that starts with `start` (BOM first, then a UTF-8 trial)."""
    if start.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    if start.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"  # Excel's "Unicode text" export: UTF-16 with BOM, tab-separated
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        decoder.decode(start, final=False)  # a character cut at the end is not an error
    except UnicodeDecodeError:
        return "cp1252"  # e.g. "Time (µs)" saved by a Windows tool
    return "utf-8"


def open_text(path: Path) -> TextIO:
    """Open for streaming text, universal newlines left to the caller (newline='')."""
    try:
        with _open_binary(path) as f:
            start = f.read(HEAD_BYTES)
        encoding = _encoding_of(start)
        return io.TextIOWrapper(_open_binary(path), encoding=encoding, newline="")
    except (OSError, EOFError) as exc:
        raise fail(path, f"cannot read the file: {exc}") from None


def read_head(path: Path, nbytes: int = HEAD_BYTES) -> str:
    """The first `nbytes` bytes (after gzip) decoded as text, for format sniffing."""
    try:
        with _open_binary(path) as f:
            start = f.read(nbytes)
    except (OSError, EOFError) as exc:
        raise fail(path, f"cannot read the file: {exc}") from None
    encoding = _encoding_of(start)
    decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
    return decoder.decode(start, final=False)


def read_json_text(path: Path, limit: int | None = None) -> str:
    """The whole file as text, refusing files above `limit` bytes (default MAX_JSON_BYTES),
    before and after decompression."""
    limit = interface.MAX_JSON_BYTES if limit is None else limit  # read late: tests patch it
    if path.stat().st_size > limit:
        raise fail(
            path,
            f"file is {_mib(path.stat().st_size)}; JSON profiles above {_mib(limit)} are refused",
        )
    try:
        with _open_binary(path) as f:
            raw = f.read(limit + 1)
    except (OSError, EOFError) as exc:
        raise fail(path, f"cannot read the file: {exc}") from None
    if len(raw) > limit:
        raise fail(path, f"file holds more than {_mib(limit)} once decompressed; refused")
    if not raw.strip():
        raise fail(path, "the file is empty")
    encoding = _encoding_of(raw[:HEAD_BYTES])
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise fail(path, f"not valid {encoding} text", line) from None


def _mib(nbytes: int) -> str:
    return f"{nbytes / (1024 * 1024):.0f} MiB"


class LineCounter:
    """Line numbers for positions in one text, asked in increasing order (cheap for huge texts)."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._pos = 0
        self._line = 1

    def line_at(self, pos: int) -> int:
        if pos < self._pos:  # rare: a caller went back; count from the start
            self._pos, self._line = 0, 1
        self._line += self._text.count("\n", self._pos, pos)
        self._pos = pos
        return self._line

    def column_at(self, pos: int) -> int:
        return pos - self._text.rfind("\n", 0, pos)
