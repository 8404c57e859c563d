"""Reading one JSON file that opbench wrote (a run, a comparison, a baseline): the one place
that turns every way the read can fail into one line naming the file, and for bad JSON its
line and column. The run reader, the comparison reader and the baseline loader all use it.

Pure Python.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from opbench.errors import InputError, Location, OpbenchError


def read_json_object(
    path: Path,
    what: str,
    *,
    missing: str | None = None,
    unreadable: type[OpbenchError] = InputError,
) -> dict[str, Any]:
    """The JSON object in `path`, or the error to show.

    what: what the file should be ("run file", "baseline"), for the messages.
    missing: the message for a file that is not there (default "no such <what>").
    unreadable: the error for a file that is missing or cannot be read (InputError, exit 2;
        the baseline loader passes BaselineError, exit 4). Text that is not UTF-8, not JSON,
        or not a JSON object is always InputError: the file is there and wrong.
    """
    where = Location(file=str(path))
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise unreadable(missing or f"no such {what}", where) from None
    except UnicodeDecodeError:
        raise InputError(f"not a {what} (not UTF-8 text)", where) from None
    except OSError as exc:
        raise unreadable(f"cannot read {what}: {exc.strerror or exc}", where) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"not valid JSON: {exc.msg}",
            Location(file=str(path), line=exc.lineno, column=exc.colno),
        ) from None
    except RecursionError:
        # json's decoder recurses once per [ or {: a file nested thousands deep is no file
        # opbench wrote, and stops here before any reader walks it.
        raise InputError(f"not a {what}: JSON nested too deep to read", where) from None
    if not isinstance(data, dict):
        raise InputError(f"a {what} holds a JSON object", where)
    return data
