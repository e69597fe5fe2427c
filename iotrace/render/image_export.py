"""Whether figures can be exported as PNG or SVG here: kaleido drives a local Chrome/Chromium, and a clear
one-line error names the piece that is missing. Shared by the answers' figures (``occupancy``, ``tune``) and the trace
reports' (:mod:`iotrace.trace.render.image`)."""

from __future__ import annotations

import os
import shutil

from iotrace.errors import IotraceError

__all__ = ["BROWSERS", "ImageExportError", "check_export", "export_problem", "kaleido_reason"]

#: The browsers kaleido (through choreographer) finds on the PATH; ``BROWSER_PATH`` names one anywhere.
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
#: How much of kaleido's own error text a one-line message carries.
REASON_CHARS = 160


class ImageExportError(IotraceError):
    """PNG/SVG export cannot run here: kaleido or a Chromium browser is missing.

    ``missing`` names the piece ("kaleido", "Chromium") and ``install`` says how to add it, so a caller that can go
    on without figures (``iotrace note``) can say so in its own words.
    """

    def __init__(self, problem: str, fix: str = "", *, missing: str = "", install: str = "") -> None:
        super().__init__(problem, fix)
        self.missing = missing
        self.install = install


def export_problem() -> ImageExportError | None:
    """Why PNG/SVG export cannot run here (kaleido not installed, no browser on the PATH), or None when it can."""
    try:
        import kaleido  # noqa: F401
    except ImportError:
        install = "pip install 'iotrace[image]' (and Chromium: apt-get install chromium)"
        return ImageExportError("PNG/SVG export needs the kaleido package, which is not installed",
                                f"{install}; HTML (-o FILE.html) needs neither", missing="kaleido", install=install)
    if not os.environ.get("BROWSER_PATH") and not any(shutil.which(b) for b in BROWSERS):
        install = "apt-get install chromium (or set BROWSER_PATH)"
        return ImageExportError("PNG/SVG export needs Chrome or Chromium for kaleido, and none is on the PATH",
                                f"{install}; HTML (-o FILE.html) needs no browser", missing="Chromium", install=install)
    return None


def check_export() -> None:
    """Raise :class:`ImageExportError` when PNG/SVG export cannot run here (before any figure is drawn)."""
    problem = export_problem()
    if problem is not None:
        raise problem


def kaleido_reason(exc: BaseException, limit: int = REASON_CHARS) -> str:
    """``exc`` as one line of at most about ``limit`` characters, cut between words (kaleido's errors run long)."""
    text = f"{type(exc).__name__}: {' '.join(str(exc).split())}".rstrip(": ")
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return cut.rstrip(",;:") + " …"
