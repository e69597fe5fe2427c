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
        # One browser for every figure; but plotly's write_images drops the errors kaleido returns (it calls
        # kaleido.write_fig_from_object_sync without cancel_on_error, plotly/io/_kaleido.py), so a figure it did not
        # write is written again alone, through write_image, which raises what went wrong.
        pio.write_images([f for _, f in figs], [paths[n] for n, _ in figs], format=fmt)
        for name, fig in figs:
            if not Path(paths[name]).is_file() or Path(paths[name]).stat().st_size == 0:
                with_kaleido_retry(lambda fig=fig, name=name: fig.write_image(paths[name], format=fmt))
    except OSError as exc:
        raise ImageExportError(f"cannot write the {fmt} figures ({exc})", "choose a writable -o path") from exc
    except Exception as exc:  # kaleido's browser errors have no stable public type
        raise ImageExportError(f"kaleido could not render the figures: {kaleido_reason(exc)}",
                               "check that Chromium starts (apt-get install chromium)") from exc
    return paths
