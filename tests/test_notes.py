"""Published notes: annotations survive regeneration, a stale note is caught, and the committed notes match what
the code computes now (a note whose numbers drift fails here)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from iotrace.notes import annotations, catalog, decode_wall
from iotrace.notes.document import Note, render
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
NOTES = ROOT / "notes"


def test_committed_notes_are_not_stale() -> None:
    assert catalog.stale(NOTES, [n for n, item in catalog.PUBLISHED.items() if not item.needs_corpus]) == {}


def test_corpus_notes_are_not_stale(corpus: Path) -> None:
    needs = [n for n, item in catalog.PUBLISHED.items() if item.needs_corpus]
    assert catalog.stale(NOTES, needs, corpus=corpus) == {}


def test_annotations_survive_regeneration_and_orphans_are_kept(tmp_path: Path) -> None:
    note = Note("n", "A note", {"card": "x"})
    note.add("first", "First", "Body one.")
    note.add("second", "Second", "Body two.")
    text = render(note, {}, "test")
    assert annotations.extract(text) == {"summary": "", "first": "", "second": ""}
    # A person writes in two blocks; then the generator drops the second section.
    written = text.replace(f"{annotations.begin('first')}\n{annotations.EMPTY}",
                           f"{annotations.begin('first')}\nA *human* remark,\nover two lines.")
    written = written.replace(f"{annotations.begin('second')}\n{annotations.EMPTY}",
                              f"{annotations.begin('second')}\nAbout section two.")
    note.sections.pop()
    again = render(note, annotations.extract(written), "test")
    kept = annotations.extract(again)
    assert kept["first"] == "A *human* remark,\nover two lines."
    assert kept["second"] == "About section two."  # its section is gone; the words are not
    assert again.index("## Annotations kept from an earlier version") < again.index("About section two.")


@pytest.mark.parametrize(("text", "message"), [
    ("<!-- iotrace:annotation a -->\nwords\n", "note.md:1: annotation 'a' is never closed"),
    ("<!-- /iotrace:annotation -->\n", "note.md:1: <!-- /iotrace:annotation --> closes no annotation"),
    ("<!-- iotrace:annotation a -->\n<!-- iotrace:annotation b -->\n", "note.md:2: annotation 'b' opens inside 'a'"),
    ("<!-- iotrace:annotation a -->\n<!-- /iotrace:annotation -->\n" * 2, "note.md:3: annotation 'a' appears twice"),
])
def test_broken_annotation_markers_are_refused(text: str, message: str) -> None:
    with pytest.raises(annotations.AnnotationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        annotations.extract(text, "note.md")


def test_a_changed_number_makes_the_note_stale(tmp_path: Path) -> None:
    shutil.copy(NOTES / "decode-wall.md", tmp_path / "decode-wall.md")
    assert catalog.stale(tmp_path, ["decode-wall"]) == {}
    path = tmp_path / "decode-wall.md"
    path.write_text(path.read_text().replace("68.82 tok/s", "87.00 tok/s", 1))
    found = catalog.stale(tmp_path, ["decode-wall"])
    assert "87.00 tok/s" in found["decode-wall"] and "68.82 tok/s" in found["decode-wall"]
    done = run_cli("notes", "check", "--dir", str(tmp_path), "decode-wall")
    assert done.returncode == 1 and "1 note(s) are stale: decode-wall" in done.stderr
    assert run_cli("notes", "check", "--dir", str(tmp_path), "nope").returncode == 2


def test_decode_wall_numbers() -> None:
    """The issue's check: 27B at 4 bits on a 3090 (936 GB/s) is a ~69 tok/s wall; 87 tok/s needs ~3.2 bits."""
    text = render(decode_wall.build(), {}, "test")
    assert "tok/s ≈ 9.36e11 / (2.72e10 × 0.5) = 68.82 tok/s" in text
    assert "**3.16 bits per weight**" in text
    # Llama 3 70B at 16 bits fits only the H200 (141 GiB); Gemma 2 27B at 4 bits on the GB10: 273e9 / 13.6e9.
    row = next(line for line in text.splitlines() if line.startswith("| Meta Llama 3 70B (70.6B) | 16 |"))
    assert row.count("does not fit") == 4 and "| 34.0 |" in row
    assert "| Google Gemma 2 27B (27.2B) | 4 | 13.6 | 68.8 | 131.8 | 246.3 | 352.9 | 20.1 |" in text
