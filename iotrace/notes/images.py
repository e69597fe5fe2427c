"""A note's figures as PNG files under ``notes/img/`` (plotly through kaleido, which drives Chromium)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from iotrace.notes.document import Note
from iotrace.render.image_export import ImageExportError, export_problem, kaleido_reason, with_kaleido_retry

__all__ = ["ImageExportError", "figure_problem", "left_out_notice", "write_images"]

#: How to give kaleido a browser: a system Chromium, or the Chrome for Testing build kaleido downloads itself.
INSTALL_BROWSER = "install Chromium (apt-get install chromium) or let kaleido fetch Chrome (kaleido_get_chrome)"


def figure_problem() -> ImageExportError | None:
    """Why the figures cannot be drawn here (no kaleido, no browser), or None when they can.

    The browser is looked for the way kaleido looks for it (choreographer's search: its own downloaded Chrome,
    ``BROWSER_PATH``, the PATH, the usual install paths), so a ``BROWSER_PATH`` naming no file counts as no browser
    and a Chrome fetched by ``kaleido_get_chrome`` counts as one.
    """
    problem = export_problem()
    if problem is not None and problem.missing == "kaleido":
        return problem
    try:
        from choreographer.browsers.chromium import Chromium

        found = Chromium.find_browser(skip_local=False)
    except Exception:  # choreographer's search is not a stable API: fall back to iotrace's PATH check
        return problem
    if found and os.path.isfile(found) and os.access(found, os.X_OK):
        return None
    named = os.environ.get("BROWSER_PATH")
    where = f"BROWSER_PATH={named} is not a program" if named else "none on the PATH nor where kaleido looks"
    return ImageExportError(f"no Chrome or Chromium for kaleido ({where})", f"{INSTALL_BROWSER}, or use --no-images",
                            missing="Chromium", install=INSTALL_BROWSER)


def left_out_notice(problem: ImageExportError) -> str:
    """The one line ``iotrace note`` prints when ``problem`` made it write the note without figures."""
    return (f"iotrace: wrote the note without images: {problem.problem}; to add them, {problem.install}, and rerun "
            "(--no-images leaves them out without this line)")


def write_images(note: Note, img_dir: Path, *, shown_as: Path | None = None) -> list[Path]:
    """Write the note's figures into ``img_dir``; returns the files written.

    What export needs (kaleido, a browser) is checked before ``img_dir`` is made, and a folder this call made is
    removed again (with the figures it got) when a figure fails, so a failed export leaves no ``img/`` behind.
    ``shown_as`` is the folder named in error messages when ``img_dir`` is a staging folder (see ``writing``).
    """
    if not note.images:
        return []
    problem = figure_problem()
    if problem is not None:
        raise ImageExportError(problem.problem, f"{problem.install}, or rebuild with --no-images",
                               missing=problem.missing, install=problem.install)
    made = not img_dir.exists()
    img_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    browser_log = logging.getLogger("choreographer")
    level = browser_log.level
    browser_log.setLevel(logging.CRITICAL)  # its watchdog warnings would add lines to iotrace's one-line error
    try:
        for image in note.images:
            path = img_dir / image.file
            try:
                with_kaleido_retry(lambda image=image, path=path: image.figure.write_image(
                    str(path), format="png", width=900, height=520, scale=1))
            except Exception as exc:  # kaleido's browser errors have no stable public type
                if made:
                    for done in written:
                        done.unlink(missing_ok=True)
                    path.unlink(missing_ok=True)
                    if not any(img_dir.iterdir()):
                        img_dir.rmdir()
                raise ImageExportError(f"cannot write {(shown_as or img_dir) / image.file}: {kaleido_reason(exc)}",
                                       "check that Chromium starts (apt-get install chromium), or rebuild with "
                                       "--no-images") from exc
            written.append(path)
    finally:
        browser_log.setLevel(level)
    return written
