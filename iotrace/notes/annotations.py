"""Human annotations in a generated note: marked blocks that the generator carries over when it rewrites the note.

A block is ``<!-- iotrace:annotation NAME -->`` … ``<!-- /iotrace:annotation -->`` on lines of their own. HTML
comments render as nothing on GitHub and GitLab, so an empty block is invisible and a filled one reads as prose.
"""

from __future__ import annotations

import re
from pathlib import Path

from iotrace.errors import IotraceError

_BEGIN = re.compile(r"^<!-- iotrace:annotation ([A-Za-z0-9_.-]+) -->$")
_END = "<!-- /iotrace:annotation -->"
#: What an empty block holds: a hint, inside a comment so it renders as nothing.
EMPTY = "<!-- write here: kept when the note is regenerated -->"


class AnnotationError(IotraceError):
    """A note whose annotation markers do not pair up: regenerating it could lose what a person wrote."""


def begin(name: str) -> str:
    return f"<!-- iotrace:annotation {name} -->"


def block(name: str, body: str | None) -> str:
    """The block for ``name``, holding ``body`` (a person's text) or the empty hint."""
    return "\n".join([begin(name), body if body is not None and body.strip() else EMPTY, _END])


def extract(text: str, source: Path | str = "the note") -> dict[str, str]:
    """Every annotation block's body by name; raises :class:`AnnotationError` on unpaired or repeated markers."""
    found: dict[str, str] = {}
    current: str | None = None
    lines: list[str] = []
    opened_at = 0
    for number, line in enumerate(text.splitlines(), 1):
        match = _BEGIN.match(line.strip())
        if match:
            if current is not None:
                raise AnnotationError(f"{source}:{number}: annotation {match.group(1)!r} opens inside {current!r} "
                                      f"(opened on line {opened_at})", f"close {current!r} with {_END} first")
            current, lines, opened_at = match.group(1), [], number
            if current in found:
                raise AnnotationError(f"{source}:{number}: annotation {current!r} appears twice",
                                      "give each block its own name")
        elif line.strip() == _END:
            if current is None:
                raise AnnotationError(f"{source}:{number}: {_END} closes no annotation", "remove it or open one")
            body = "\n".join(lines).strip("\n")
            found[current] = "" if body.strip() == EMPTY else body
            current = None
        elif current is not None:
            lines.append(line)
    if current is not None:
        raise AnnotationError(f"{source}:{opened_at}: annotation {current!r} is never closed",
                              f"end it with {_END} on a line of its own")
    return found


def orphans(kept: dict[str, str], slots: list[str]) -> dict[str, str]:
    """Filled blocks whose slot the new version no longer has: they are appended, never dropped."""
    return {name: body for name, body in kept.items() if name not in slots and body.strip()}
