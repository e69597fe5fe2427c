"""Figures as PNG or SVG through kaleido, which drives a local Chrome/Chromium; a clear error when either is missing."""

from __future__ import annotations

from pathlib import Path

from iotrace.render.image_export import ImageExportError, check_export, kaleido_reason, with_kaleido_retry
from iotrace.trace.render.figures import figures
from iotrace.trace.reports.report import Report

__all__ = ["write_figures"]


def write_figures(report: Report, stem: Path, fmt: str, first: Path | None = None) -> dict[str, str]:
    """Write every figure as ``<stem>-<name>.<fmt>`` (the roofline to ``first`` when given); returns name → path."""
    check_export()
    import plotly.io as pio

    figs = figures(report)
    paths = {}
    for name, _ in figs:
        path = first if (first is not None and name == "roofline") else stem.parent / f"{stem.name}-{name}.{fmt}"
        paths[name] = str(path)
    try:
        with_kaleido_retry(lambda: pio.write_images([f for _, f in figs], [paths[n] for n, _ in figs], format=fmt))
    except OSError as exc:
        raise ImageExportError(f"cannot write the {fmt} figures ({exc})", "choose a writable -o path") from exc
    except Exception as exc:  # kaleido's browser errors have no stable public type
        raise ImageExportError(f"kaleido could not render the figures: {kaleido_reason(exc)}",
                               "check that Chromium starts (apt-get install chromium)") from exc
    return paths
