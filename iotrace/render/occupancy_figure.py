"""Occupancy what-if curves as a plotly figure, like Nsight Compute's three occupancy graphs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from iotrace.occupancy import OccupancyResult, curve_block_size, curve_registers, curve_shared_mem

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["occupancy_figure"]


def occupancy_figure(result: OccupancyResult) -> go.Figure:
    """Active warps per SM against block size, registers and shared memory; the launch marked on each."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    panels = [
        ("threads per block", curve_block_size(result), result.threads_per_block),
        ("registers per thread", curve_registers(result), result.registers_per_thread),
        ("shared memory per block (bytes, reserve included)", curve_shared_mem(result),
         result.allocated_smem_per_block),
    ]
    fig = make_subplots(rows=1, cols=3, subplot_titles=[p[0] for p in panels], shared_yaxes=True)
    for col, (title, points, current) in enumerate(panels, start=1):
        fig.add_trace(go.Scatter(x=[p.x for p in points], y=[p.active_warps_per_sm for p in points],
                                 mode="lines", line_shape="hv", name=title, showlegend=False,
                                 hovertemplate="%{x}: %{y} warps<extra></extra>"), row=1, col=col)
        fig.add_trace(go.Scatter(x=[current], y=[result.active_warps_per_sm], mode="markers",
                                 marker={"size": 11, "color": "crimson"}, name="this launch",
                                 showlegend=col == 1), row=1, col=col)
    fig.update_yaxes(title_text="active warps per SM", range=[0, result.max_warps_per_sm * 1.05], row=1, col=1)
    fig.update_layout(title=f"Occupancy what-if, CC {result.cc}: {result.occupancy_pct:.1f}% "
                            f"({result.active_warps_per_sm}/{result.max_warps_per_sm} warps), "
                            f"limited by {', '.join(result.limiters) or '—'}  (modelled)",
                      template="plotly_white", height=420, width=1200)
    return fig
