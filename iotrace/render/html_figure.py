"""Writing a plotly figure as one offline HTML file (plotly.js embedded), with the path checked first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from iotrace.errors import InvalidValueError

__all__ = ["check_html_path", "write_html"]


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
