"""The note model: a header, numbered sections each followed by its annotation slot, and the images it uses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from iotrace.notes import annotations

#: The header line that changes with every commit; the staleness check ignores it (``catalog.normalise``).
GENERATED_PREFIX = annotations.GENERATED_PREFIX


@dataclass
class Section:
    """One section: its slug names its annotation slot, so a person's text stays beside the section it is about."""

    slug: str
    title: str
    body: str


@dataclass
class Image:
    """A figure the note shows, written to ``notes/img/<file>`` by the renderer (PNG through kaleido)."""

    file: str
    figure: Any  # a plotly Figure
    alt: str


@dataclass
class Note:
    name: str
    title: str
    header: dict[str, str]
    sections: list[Section] = field(default_factory=list)
    images: list[Image] = field(default_factory=list)

    def add(self, slug: str, title: str, *parts: str) -> None:
        self.sections.append(Section(slug, title, "\n\n".join(p.strip("\n") for p in parts if p)))


def render(note: Note, kept: dict[str, str], generated: str) -> str:
    """The note as Markdown, each section's annotation block filled from ``kept`` (name -> body)."""
    lines = [f"# {note.title}", "", f"{GENERATED_PREFIX} {generated}._", "", "| | |", "|---|---|"]
    lines += [f"| {key} | {value} |" for key, value in note.header.items()]
    lines += ["", annotations.block("summary", kept.get("summary"))]
    slots = ["summary"]
    for number, section in enumerate(note.sections, 1):
        lines += ["", f"## {number}. {section.title}", "", section.body, "",
                  annotations.block(section.slug, kept.get(section.slug))]
        slots.append(section.slug)
    left = annotations.orphans(kept, slots)
    if left:  # sections that no longer exist: their annotations stay, at the end, under their old names
        lines += ["", "## Annotations kept from an earlier version", ""]
        for name, body in left.items():
            lines += [annotations.block(name, body), ""]
    return "\n".join(lines).rstrip() + "\n"


def table(columns: list[str], rows: list[list[Any]]) -> str:
    """A Markdown table; cells are escaped so a name from a trace cannot break the layout."""
    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(cell(c) for c in columns) + " |",
           "|" + "|".join("---:" if i else "---" for i in range(len(columns))) + "|"]
    out += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(out)
