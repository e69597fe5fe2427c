"""A note's figures as PNG files under ``notes/img/`` (plotly through kaleido, which drives Chromium)."""

from __future__ import annotations

from pathlib import Path

from iotrace.errors import IotraceError
from iotrace.notes.document import Note


class ImageExportError(IotraceError):
    """A figure could not be written as PNG (kaleido or Chromium missing)."""


def write_images(note: Note, img_dir: Path) -> list[Path]:
    img_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for image in note.images:
        path = img_dir / image.file
        try:
            image.figure.write_image(str(path), format="png", width=900, height=520, scale=1)
        except (ImportError, ValueError, RuntimeError) as exc:
            raise ImageExportError(f"cannot write {path}: {' '.join(str(exc).split())[:160]}",
                                   "install the image extra (pip install -e '.[image]') and Debian's chromium, "
                                   "or rebuild with --no-images") from exc
        written.append(path)
    return written
