"""Writing a plotly figure as one offline HTML file (plotly.js embedded), with the path checked first; or as PNG or
SVG through kaleido (:func:`write_figure`), which needs a local Chrome/Chromium."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from iotrace.errors import InvalidValueError

__all__ = ["check_html_path", "write_figure", "write_html"]


def check_html_path(path: Path) -> None:
    """Refuse ``-o`` paths that are not .html before any work is done."""
    if Path(path).suffix.lower() not in (".html", ".htm"):
        raise InvalidValueError(f"-o {path}: the figure is written as HTML", "name the file FILE.html")


def write_html(figure: Any, path: Path) -> None:
    """The figure as a self-contained page that opens without a network (plotly.js included)."""
    check_html_path(path)
    try:
        figure.write_html(str(path), include_plotlyjs=True)
    except OSError as exc:
        raise InvalidValueError(f"cannot write {path} ({exc.strerror})", "choose a writable path") from exc


def write_figure(figure: Any, path: Path, fmt: str) -> None:
    """``figure`` into ``path`` as ``fmt``: ``html`` (:func:`write_html`), or ``png``/``svg`` through kaleido; a missing
    kaleido or browser, an unwritable path or a browser that fails is one :class:`~iotrace.errors.IotraceError` line."""
    if fmt == "html":
        write_html(figure, path)
        return
    from iotrace.render.image_export import ImageExportError, check_export, kaleido_reason, with_kaleido_retry

    check_export()
    try:
        with_kaleido_retry(lambda: figure.write_image(str(path), format=fmt))
    except OSError as exc:
        raise InvalidValueError(f"cannot write {path} ({exc.strerror or exc})", "choose a writable path") from exc
    except Exception as exc:  # kaleido's browser errors have no stable public type
        raise ImageExportError(f"kaleido could not render {path}: {kaleido_reason(exc)}",
                               "check that Chromium starts (apt-get install chromium), or write -o FILE.html") from exc
