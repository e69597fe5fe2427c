"""Figures as PNG or SVG through kaleido, which drives a local Chrome/Chromium; a clear error when either is missing."""

from __future__ import annotations

import shutil
from pathlib import Path

from iotrace.errors import IotraceError
from iotrace.trace.render.figures import figures
from iotrace.trace.reports.report import Report

__all__ = ["ImageExportError", "write_figures"]

_BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


class ImageExportError(IotraceError):
    """PNG/SVG export cannot run here: kaleido or a Chromium browser is missing."""


def _check() -> None:
    try:
        import kaleido  # noqa: F401
    except ImportError as exc:
        raise ImageExportError("PNG/SVG export needs the kaleido package, which is not installed",
                               "pip install 'iotrace[image]' (and Chromium: apt-get install chromium); "
                               "--format html needs neither") from exc
    import os

    if not os.environ.get("BROWSER_PATH") and not any(shutil.which(b) for b in _BROWSERS):
        raise ImageExportError("PNG/SVG export needs Chrome or Chromium for kaleido, and none is on the PATH",
                               "apt-get install chromium (or set BROWSER_PATH); --format html needs no browser")


def write_figures(report: Report, stem: Path, fmt: str, first: Path | None = None) -> dict[str, str]:
    """Write every figure as ``<stem>-<name>.<fmt>`` (the roofline to ``first`` when given); returns name → path."""
    _check()
    import plotly.io as pio

    figs = figures(report)
    paths = {}
    for name, _ in figs:
        path = first if (first is not None and name == "roofline") else stem.parent / f"{stem.name}-{name}.{fmt}"
        paths[name] = str(path)
    try:
        pio.write_images([f for _, f in figs], [paths[n] for n, _ in figs], format=fmt)
    except OSError as exc:
        raise ImageExportError(f"cannot write the {fmt} figures ({exc})", "choose a writable -o path") from exc
    except Exception as exc:  # kaleido's browser errors have no stable public type
        raise ImageExportError(f"kaleido could not render the figures: {type(exc).__name__}: "
                               f"{' '.join(str(exc).split())[:160]}",
                               "check that Chromium starts (apt-get install chromium)") from exc
    return paths
