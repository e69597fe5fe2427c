"""Plotly figures of a report: log-log hierarchical roofline, stall bars, occupancy what-if curves, top kernels.

Every name from a trace is HTML-escaped before it enters a figure: plotly.js renders a small HTML subset in
labels and hover text, so an unescaped kernel name could inject markup. Plotly shows the entities as the text.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import numpy as np

from iotrace.trace.render.fmt import bytes_, num, pct, short
from iotrace.trace.reports.report import Report
from iotrace.trace.reports.stall_reasons import reason

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["figures", "occupancy_figures", "roofline_figure", "stalls_figure", "timeline_figure"]

_SYMBOL = {"dram": "circle", "l2": "square", "l1": "diamond"}
_COLOR = {"dram": "#1f77b4", "l2": "#2ca02c", "l1": "#ff7f0e"}


def safe(text: object, width: int = 80) -> str:
    return html.escape(short(str(text), width))


def _empty(title: str, message: str) -> go.Figure:
    import plotly.graph_objects as go

    fig = go.Figure()
    fig.add_annotation(text=html.escape(message), showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(title=title, template="plotly_white", height=300, xaxis_visible=False, yaxis_visible=False)
    return fig


def roofline_figure(report: Report) -> go.Figure:
    """Kernels as points per memory level (x: FLOP/byte, y: FLOP/s), under the ceilings of the first placed kernel."""
    import plotly.graph_objects as go

    points = [k.roofline for k in report.kernels if k.roofline is not None and k.roofline.achieved_flop_per_s]
    if not points:
        lines = [u["line"] for u in report.unavailable if u["report"].startswith("roofline")]
        return _empty("Roofline", lines[0] if lines else "roofline not available: no FLOPs and bytes in this trace")
    fig = go.Figure()
    intensities = [lv.intensity for p in points for lv in p.levels if lv.intensity]
    low = min(min(intensities) / 10, 1e-2) if intensities else 1e-2
    high = max(max(intensities) * 10, 1e3) if intensities else 1e3
    xs = np.logspace(np.log10(low), np.log10(high), 200)
    ref = points[0]
    if ref.peak_flop_per_s:
        for lv in ref.levels:
            if lv.ceiling_bytes_per_s:
                fig.add_trace(go.Scatter(
                    x=xs, y=np.minimum(ref.peak_flop_per_s, xs * lv.ceiling_bytes_per_s), mode="lines",
                    line={"color": _COLOR.get(lv.level, "grey"), "width": 2},
                    name=f"{lv.level.upper()} roof {num(lv.ceiling_bytes_per_s)}B/s",
                    hovertext=html.escape(lv.ceiling_source), hoverinfo="text+name"))
        fig.add_hline(y=ref.peak_flop_per_s, line_dash="dot", line_color="black",
                      annotation_position="bottom right",
                      annotation_text=html.escape(f"{ref.precision} peak {num(ref.peak_flop_per_s)}FLOP/s — "
                                                  f"{short(ref.peak_source, 70)}"))
    for level in ("dram", "l2", "l1"):
        xs_, ys_, texts = [], [], []
        for p in points:
            lv = p.level(level)
            if lv is None or not lv.intensity:
                continue
            xs_.append(lv.intensity)
            ys_.append(p.achieved_flop_per_s)
            texts.append("<br>".join([
                f"#{p.kernel_id} {safe(p.kernel, 70)}", f"{level.upper()}: {bytes_(lv.bytes)} ({p.basis})",
                f"intensity {num(lv.intensity)} FLOP/byte", f"achieved {num(p.achieved_flop_per_s)}FLOP/s",
                f"bound {p.bound or '—'}, {pct(p.pct_of_attainable)} of attainable"]))
        if xs_:
            fig.add_trace(go.Scatter(x=xs_, y=ys_, mode="markers", name=f"kernels at {level.upper()}",
                                     marker={"symbol": _SYMBOL[level], "size": 11, "color": _COLOR[level],
                                             "line": {"width": 1, "color": "black"}},
                                     hovertext=texts, hoverinfo="text"))
    basis = sorted({p.basis for p in points})
    fig.update_xaxes(type="log", title="arithmetic intensity (FLOP/byte)")
    fig.update_yaxes(type="log", title="FLOP/s", exponentformat="SI")
    fig.update_layout(title=f"Hierarchical roofline ({' and '.join(basis)}; ceilings: "
                            f"{html.escape(short(ref.peak_source.split(':')[0], 40))})",
                      template="plotly_white", height=520, width=1000, legend={"orientation": "h", "y": -0.2})
    return fig


def stalls_figure(report: Report, top: int = 12) -> go.Figure:
    """Stacked horizontal bars: each kernel's stall shares (primary family), the largest reasons named."""
    import plotly.graph_objects as go

    kernels = [k for k in report.kernels if k.stall_shares()][:top]
    if not kernels:
        lines = [u["line"] for u in report.unavailable if u["report"] == "warp stalls"]
        return _empty("Warp stalls", lines[0] if lines else "warp stalls not available")
    totals: dict[str, float] = {}
    for k in kernels:
        for key, share in k.stall_shares().items():
            totals[key] = totals.get(key, 0.0) + share
    named = sorted(totals, key=totals.__getitem__, reverse=True)[:8]
    labels = [f"#{k.kernel_id} {safe(k.name, 40)}" for k in kernels]
    fig = go.Figure()
    for key in [*named, "other"]:
        values = []
        for k in kernels:
            shares = k.stall_shares()
            values.append(100 * (sum(v for r, v in shares.items() if r not in named) if key == "other"
                                 else shares.get(key, 0.0)))
        label = "other reasons" if key == "other" else reason(key).label
        fig.add_trace(go.Bar(y=labels, x=values, name=html.escape(label), orientation="h",
                             hovertemplate="%{y}<br>" + html.escape(label) + ": %{x:.1f}%<extra></extra>"))
    fig.update_layout(barmode="stack", title="Warp stalls (measured): share of cycles between issued instructions",
                      xaxis_title="% of stall cycles", template="plotly_white",
                      height=max(300, 60 + 40 * len(kernels)), width=1000, yaxis={"autorange": "reversed"})
    return fig


def occupancy_figures(report: Report, top: int = 3) -> list[tuple[str, go.Figure]]:
    """The what-if curves of the first kernels with a computed occupancy (one per distinct launch)."""
    from iotrace.render.occupancy_figure import occupancy_figure

    out, seen = [], set()
    for k in report.kernels:
        occ = k.occupancy
        if occ is None or occ.result is None or id(occ.result) in seen:  # cached: one object per distinct launch
            continue
        seen.add(id(occ.result))
        fig = occupancy_figure(occ.result)
        fig.update_layout(title=f"#{k.kernel_id} {safe(k.name, 50)}: " + fig.layout.title.text, width=1000)
        out.append((f"occupancy-{k.kernel_id}", fig))
        if len(out) >= top:
            break
    return out


def timeline_figure(report: Report) -> go.Figure | None:
    import plotly.graph_objects as go

    if report.timeline is None or report.timeline.top_kernels.empty:
        return None
    top = report.timeline.top_kernels
    # Ranked labels: C++ template names often share their first 50 characters, and plotly merges equal categories.
    labels = [f"{rank}. {safe(n, 50)}" for rank, n in enumerate(top["name"], 1)]
    fig = go.Figure(go.Bar(x=top["total_ns"] / 1e6, y=labels, orientation="h",
                           hovertemplate="%{y}<br>%{x:.3f} ms<extra></extra>"))
    fig.update_layout(title="Top kernels by total time (measured)", xaxis_title="ms", template="plotly_white",
                      height=max(300, 60 + 30 * len(top)), width=1000, yaxis={"autorange": "reversed"})
    return fig


def figures(report: Report) -> list[tuple[str, go.Figure]]:
    """Every figure of the report, named: roofline, stalls, occupancy-<id>..., timeline."""
    out = [("roofline", roofline_figure(report)), ("stalls", stalls_figure(report)), *occupancy_figures(report)]
    line = timeline_figure(report)
    if line is not None:
        out.append(("timeline", line))
    return out
