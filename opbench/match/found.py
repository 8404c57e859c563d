"""What matching has found so far for one model: links, the doubts about them, and the links
found through part of a path that wait for their proof. Shared by the rules in links.py
(names), fusion.py (fused rows) and prefix.py (the proof).

Pure Python: no torch, no triton.
"""

from __future__ import annotations

from dataclasses import dataclass

from opbench.match.prefix import Member, PrefixLink


class MatchSource:
    REFERENCE_NAME = "reference_name"
    MAP = "map"
    NAME = "name"
    FUSION = "fusion"
    SIGNATURE = "signature"


@dataclass(frozen=True)
class Link:
    """Reference row (position in ReferenceProfile.layers) → suite layer, and why."""

    row: int
    layer: str
    source: str


class Found:
    """The links and ambiguities found so far for one model; the links found through part of
    a path that still wait for their proof (opbench/match/prefix.py); and which members of
    joined rows (`a + b`) some layer stands for (`accounted`: (row, member index); `whole`:
    rows the user linked as a whole, by a --map entry or a reference_name naming the row)."""

    def __init__(self) -> None:
        self.links: list[Link] = []
        self.ambiguities: dict[int, list[str]] = {}
        self.pending: list[PrefixLink] = []
        self.accounted: set[tuple[int, int]] = set()
        self.whole: set[int] = set()

    def add(self, row: int, layer: str, source: str) -> None:
        if not any(link.row == row and link.layer == layer for link in self.links):
            self.links.append(Link(row, layer, source))

    def add_whole(self, row: int, layer: str, source: str) -> None:
        self.add(row, layer, source)
        self.whole.add(row)

    def add_named(
        self, row: int, layer: str, source: str, member: Member, key: str, alone: bool
    ) -> None:
        """A link found by a member's name: at once when the key is its whole path, else
        after the prefix proves itself (`prove`)."""
        rest = member.rest_of(key)
        if rest:
            self.pending.append(PrefixLink(row, layer, source, member, rest, alone))
        else:
            self.add(row, layer, source)
            self.accounted.add((row, member.index))

    def prove(self, link: PrefixLink) -> None:
        self.add(link.row, link.layer, link.source)
        self.accounted.add((link.row, link.member.index))

    def doubt(self, row: int, reason: str) -> None:
        reasons = self.ambiguities.setdefault(row, [])
        if reason not in reasons:
            reasons.append(reason)

    def layers(self) -> set[str]:
        return {link.layer for link in self.links}

    def rows(self) -> set[int]:
        return {link.row for link in self.links}
