"""Reading the events of a big JSON trace one at a time.

Profilers write traces as one JSON array of events (onnxruntime, trtexec) or as an object
whose "traceEvents" member is that array (Chrome trace / Kineto). `json.load` on a 100 MB
trace builds every event at once and needs several GB; here each event is decoded by the C
scanner (`JSONDecoder.raw_decode`), handed to the reader, and dropped unless the reader keeps
it. Memory stays near the size of the text.

A profile cut short (the process died before writing the closing bracket) is accepted up to
its last complete event, and `truncated` says so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from opbench.errors import InputError
from opbench.reference.textio import LineCounter, fail

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def _skip(text: str, pos: int) -> int:
    return _WHITESPACE.match(text, pos).end()  # type: ignore[union-attr]


def _error_at(path: Path, text: str, pos: int, message: str) -> InputError:
    lines = LineCounter(text)
    return fail(path, message, lines.line_at(pos), lines.column_at(pos))


def _decode_at(path: Path, text: str, pos: int) -> tuple[Any, int]:
    try:
        return _DECODER.raw_decode(text, pos)
    except json.JSONDecodeError as exc:
        raise fail(path, f"invalid JSON: {exc.msg}", exc.lineno, exc.colno) from None
    except RecursionError:
        raise _error_at(path, text, pos, "invalid JSON: nested too deeply") from None


class JsonEvents:
    """The events of a trace, in file order: `for pos, event in JsonEvents(path, text)`.

    pos is the event's offset in `text` (turn it into a line with `LineCounter`).
    `meta` holds the other members of a top-level object once iteration is done.
    """

    def __init__(self, path: Path, text: str, events_key: str = "traceEvents") -> None:
        self.path = path
        self.text = text
        self.events_key = events_key
        self.meta: dict[str, Any] = {}
        self.truncated = False
        self.top = text[_skip(text, 0) : _skip(text, 0) + 1]

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        text, path = self.text, self.path
        pos = _skip(text, 0)
        if pos == len(text):
            raise fail(path, "the file is empty")
        if text[pos] == "[":
            yield from self._array(pos)
            return
        if text[pos] != "{":
            raise _error_at(path, text, pos, "expected a JSON array or object")
        found = False
        for key, value_pos in self._members(pos):
            if key == self.events_key and text[value_pos] == "[":
                found = True
                end = yield from self._array(value_pos)
                self._end = end
            else:
                self.meta[key], self._end = _decode_at(path, text, value_pos)
        if not found:
            raise fail(path, f'a JSON object without a "{self.events_key}" array', 1, 1)

    def _members(self, pos: int) -> Iterator[tuple[str, int]]:
        """Yield (key, value position) of an object's members; the caller consumes each value
        and leaves the end position in self._end."""
        text, path = self.text, self.path
        pos = _skip(text, pos + 1)
        if text.startswith("}", pos):
            return
        while True:
            if not text.startswith('"', pos):
                raise _error_at(path, text, pos, "invalid JSON: expected a member name")
            key, pos = _decode_at(path, text, pos)
            pos = _skip(text, pos)
            if not text.startswith(":", pos):
                raise _error_at(path, text, pos, "invalid JSON: expected ':'")
            pos = _skip(text, pos + 1)
            if pos == len(text):
                self.truncated = True
                return
            yield key, pos
            pos = _skip(text, self._end)
            if text.startswith(",", pos):
                pos = _skip(text, pos + 1)
            elif text.startswith("}", pos) or pos == len(text):
                self.truncated = self.truncated or pos == len(text)
                return
            else:
                raise _error_at(path, text, pos, "invalid JSON: expected ',' or '}'")

    def _array(self, pos: int) -> Iterator[tuple[int, Any]]:
        """Yield (position, item) of the array starting at pos; return the end position."""
        text, path = self.text, self.path
        pos = _skip(text, pos + 1)
        if text.startswith("]", pos):
            return pos + 1
        while True:
            if pos == len(text):
                self.truncated = True
                return pos
            item, end = _decode_at(path, text, pos)
            yield pos, item
            pos = _skip(text, end)
            if text.startswith(",", pos):
                pos = _skip(text, pos + 1)
            elif text.startswith("]", pos):
                return pos + 1
            elif pos == len(text):
                self.truncated = True
                return pos
            else:
                raise _error_at(path, text, pos, "invalid JSON: expected ',' or ']'")
