"""Writing a note and its figures all at once or not at all.

Everything goes first into a hidden staging folder beside the note and is moved into place (``os.replace``) only
once all of it is written, so a failure midway (a figure kaleido cannot draw, a full disk, a write refused) leaves
no partial note, no empty ``img/`` and no new folder, and the note already at the destination untouched.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from iotrace.errors import InvalidValueError
from iotrace.notes.document import Note
from iotrace.notes.images import write_images

__all__ = ["write_note"]


def _cannot_write(path: Path, exc: OSError) -> InvalidValueError:
    reason = exc.strerror or type(exc).__name__
    return InvalidValueError(f"cannot write the note {path}: {reason}", "choose a writable -o path")


def _missing(folder: Path) -> list[Path]:
    """``folder`` and its parents that do not exist yet, deepest first (the ones to remove again on failure)."""
    missing = []
    for parent in (folder, *folder.parents):
        if parent.exists():
            break
        missing.append(parent)
    return missing


def _remove_if_empty(folders: list[Path]) -> None:
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def write_note(note: Note, text: str, path: Path, *, images: bool) -> list[Path]:
    """Write ``text`` to ``path`` and, when ``images``, the note's figures to ``img/`` beside it; returns the files
    written (the figures, then the note). Either all of them are written or, on any failure, none is."""
    made = _missing(path.parent)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent))
    except OSError as exc:
        _remove_if_empty(made)
        raise _cannot_write(path, exc) from None
    img = path.parent / "img"
    moved: list[Path] = []  # figures that were not there before: removed again when a later step fails
    try:
        figures = write_images(note, staging / "img", shown_as=img) if images else []
        (staging / path.name).write_text(text)
        if figures and not img.is_dir():
            img.mkdir()
            made.insert(0, img)
        written = []
        for figure in figures:
            target = img / figure.name
            new = not target.exists()
            os.replace(figure, target)
            if new:
                moved.append(target)
            written.append(target)
        os.replace(staging / path.name, path)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        for target in moved:
            target.unlink(missing_ok=True)
        _remove_if_empty(made)
        if isinstance(exc, OSError):
            raise _cannot_write(path, exc) from None
        raise
    shutil.rmtree(staging, ignore_errors=True)
    return [*written, path]
