"""A note's figures as PNG files under ``notes/img/`` (plotly through kaleido, which drives Chromium)."""

from __future__ import annotations

from pathlib import Path

from iotrace.notes.document import Note
from iotrace.trace.render.image import ImageExportError, check_export, kaleido_reason

__all__ = ["ImageExportError", "write_images"]


def write_images(note: Note, img_dir: Path) -> list[Path]:
    """Write the note's figures into ``img_dir``; returns the files written.

    What export needs (kaleido, a browser) is checked before ``img_dir`` is made, and a folder this call made is
    removed again when a figure fails, so a failed export leaves no empty ``img/`` behind.
    """
    if not note.images:
        return []
    try:
        check_export()
    except ImageExportError as exc:
        raise ImageExportError(exc.problem, f"{exc.install}, or rebuild with --no-images", missing=exc.missing,
                               install=exc.install) from None
    made = not img_dir.exists()
    img_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for image in note.images:
        path = img_dir / image.file
        try:
            image.figure.write_image(str(path), format="png", width=900, height=520, scale=1)
        except Exception as exc:  # kaleido's browser errors have no stable public type
            if made and not any(img_dir.iterdir()):
                img_dir.rmdir()
            raise ImageExportError(f"cannot write {path}: {kaleido_reason(exc)}",
                                   "check that Chromium starts (apt-get install chromium), or rebuild with "
                                   "--no-images") from exc
        written.append(path)
    return written
