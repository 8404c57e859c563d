"""Suite YAML → plain data, keeping where each value was written.

`parse_yaml` returns the data and a map from each path into it (("models", 0, "layers", 2,
"heads")) to its (line, column), so every later mistake can name its line. YAML merge keys
(`<<: *anchor`) are honoured; merged keys keep the line where the anchor wrote them.

`check_bounds` reads the file's events once, before anything is built, and refuses a file
nested deeper than MAX_DEPTH or one whose aliases would expand past MAX_NODES values (475
bytes of `&a [*b, *b, ...]` reach 10^9): PyYAML's composer and `construct` recurse once per
level, and expand every alias in full.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import yaml

from opbench.errors import InputError, Location

# A suite is a few levels deep (models > layers > layer > timing > value); 100 leaves room.
MAX_DEPTH = 100
# Values once every alias is expanded: the largest shipped suite holds about 1,400.
MAX_NODES = 200_000

Path_ = tuple[Any, ...]
LineMap = dict[Path_, tuple[int, int]]
MERGE_TAG = "tag:yaml.org,2002:merge"


def construct(
    loader: yaml.SafeLoader, node: yaml.Node, path: Path_, lines: LineMap, file: str
) -> Any:
    lines[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        merged: dict[Any, Any] = {}
        merged_lines: LineMap = {}
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG:
                # `<<: *anchor` (or a list of anchors): keys written here win over merged ones;
                # merged keys keep the line where the anchor wrote them.
                sources = (
                    value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                )
                for source in sources:
                    source_lines: LineMap = {}
                    value = construct(loader, source, path, source_lines, file)
                    if not isinstance(value, dict):
                        raise InputError(
                            "'<<' merges a mapping (an &anchor of one)", node_location(file, source)
                        )
                    for k, v in value.items():
                        if k not in merged:
                            merged[k] = v
                            prefix = (*path, k)
                            merged_lines.update(
                                {
                                    p: at
                                    for p, at in source_lines.items()
                                    if p[: len(prefix)] == prefix
                                }
                            )
                continue
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) or key is None:
                raise InputError("mapping keys must be plain names", node_location(file, key_node))
            if key in result:
                raise InputError(f"duplicate key {key!r}", node_location(file, key_node))
            result[key] = construct(loader, value_node, (*path, key), lines, file)
            lines[(*path, key)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
        if merged:
            for p, at in merged_lines.items():
                if p[len(path)] not in result:
                    lines[p] = at
            result = {**{k: v for k, v in merged.items() if k not in result}, **result}
        return result
    if isinstance(node, yaml.SequenceNode):
        return [
            construct(loader, item, (*path, i), lines, file) for i, item in enumerate(node.value)
        ]
    return loader.construct_object(node, deep=True)


def node_location(file: str, node: yaml.Node) -> Location:
    return Location(file=file, line=node.start_mark.line + 1, column=node.start_mark.column + 1)


def syntax_error(exc: yaml.MarkedYAMLError, file: str, text: str | None = None) -> InputError:
    """A YAML syntax error as one line naming file, line and column.

    PyYAML finds an unclosed `{`, `[` or quote only at the end of the stream, one line past
    the last (`…:8:1` in a 7-line file): then the line names where the unclosed part starts
    (the error's context), and says the file ends first."""
    mark = exc.problem_mark or exc.context_mark
    message = " ".join(part for part in (exc.context, exc.problem) if part) or "invalid YAML"
    if mark is not None and text is not None and _at_end(mark, text):
        if exc.context_mark is not None and not _at_end(exc.context_mark, text):
            mark = exc.context_mark
            what = re.sub(r"^while (parsing|scanning) ", "", exc.context or "what")
            message = f"{what} that starts here is not closed before the file ends" + (
                f" ({exc.problem})" if exc.problem else ""
            )
            return InputError(f"YAML syntax error: {message}", _location(file, mark))
        return InputError(f"YAML syntax error: {message}", _last_line(file, text))
    return InputError(f"YAML syntax error: {message}", _location(file, mark))


def _at_end(mark: yaml.Mark, text: str) -> bool:
    """The mark lies past the last character of the text (PyYAML's end of stream)."""
    return mark.index >= len(text.rstrip())


def _location(file: str, mark: yaml.Mark | None) -> Location:
    return Location(
        file=file,
        line=mark.line + 1 if mark else None,
        column=mark.column + 1 if mark else None,
    )


def _last_line(file: str, text: str) -> Location:
    """The end of the last line holding anything: where the file stops short."""
    lines = text.rstrip().splitlines() or [""]
    return Location(file=file, line=len(lines), column=len(lines[-1]) + 1)


@contextmanager
def _reading(text: str, file: str) -> Iterator[yaml.SafeLoader]:
    """A SafeLoader over `text`, its errors as one InputError naming the file (and line)."""
    loader = yaml.SafeLoader(text)
    try:
        yield loader
    except yaml.MarkedYAMLError as exc:
        raise syntax_error(exc, file, text) from None
    except yaml.YAMLError as exc:
        raise InputError(f"YAML error: {exc}", Location(file=file)) from None
    finally:
        loader.dispose()


def check_bounds(text: str, file: str) -> None:
    """Refuse, as one InputError naming the line, YAML nested deeper than MAX_DEPTH or holding
    more than MAX_NODES values once its aliases are expanded. Reads events only: the parser
    keeps its own stack, so this never recurses, and nothing is expanded."""
    sizes: dict[str, int] = {}  # anchor -> values it expands to
    # one entry per open collection: [values in it so far, its anchor]
    open_: list[list[Any]] = [[0, None]]
    with _reading(text, file) as loader:
        while (event := loader.get_event()) is not None:
            if isinstance(event, yaml.CollectionStartEvent):
                if len(open_) > MAX_DEPTH:
                    raise InputError(
                        f"nested more than {MAX_DEPTH} levels deep",
                        _location(file, event.start_mark),
                    )
                open_.append([1, event.anchor])
                continue
            if isinstance(event, yaml.CollectionEndEvent):
                size, anchor = open_.pop()
            elif isinstance(event, yaml.AliasEvent):
                size, anchor = sizes.get(event.anchor, 1), None
            elif isinstance(event, yaml.ScalarEvent):
                size, anchor = 1, event.anchor
            else:
                continue
            if anchor is not None:
                sizes[anchor] = size
            open_[-1][0] += size
            if open_[-1][0] > MAX_NODES:
                raise InputError(
                    f"its aliases (*name) expand to more than {MAX_NODES:,} values",
                    _location(file, event.start_mark),
                )


def parse_yaml(text: str, file: str) -> tuple[Any, LineMap]:
    lines: LineMap = {}
    check_bounds(text, file)
    with _reading(text, file) as loader:
        node = loader.get_single_node()
        if node is None:
            return None, lines
        return construct(loader, node, (), lines, file), lines
