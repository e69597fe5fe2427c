"""Whether figures can be exported as PNG or SVG here: kaleido drives a local Chrome/Chromium, and a clear
one-line error names the piece that is missing. Shared by the answers' figures (``occupancy``, ``tune``) and the trace
reports' (:mod:`iotrace.trace.render.image`)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import TypeVar

from iotrace.errors import IotraceError

T = TypeVar("T")

__all__ = ["BROWSERS", "ImageExportError", "check_export", "export_problem", "kaleido_reason", "with_kaleido_retry"]

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


#: kaleido 1.x reads the tab's JavaScript context from the first ``Runtime.executionContextCreated`` after it starts
#: navigating (kaleido/_kaleido_tab/_tab.py, ``navigate``); on a loaded machine that can be the blank page's context,
#: where its script is not loaded, and the export fails with "kaleido_scopes is not defined" (seen on 2-core CI
#: machines; the same export passes when idle). A fresh try gets a fresh tab; any other error is raised at once.
RACE = "kaleido_scopes is not defined"
TRIES = 3


def with_kaleido_retry(export: Callable[[], T]) -> T:
    """``export()``, tried again (up to :data:`TRIES` times in all) when kaleido lost the race above."""
    for attempt in range(1, TRIES + 1):
        try:
            return export()
        except Exception as exc:  # kaleido's browser errors have no stable public type
            if RACE not in str(exc) or attempt == TRIES:
                raise
    raise AssertionError("unreachable")  # the loop returns or raises
