"""Occupancy what-if curves as a plotly figure, like Nsight Compute's three occupancy graphs; the answer as Markdown."""

from __future__ import annotations

from typing import TYPE_CHECKING

from iotrace.occupancy import LIMIT_NAMES, OccupancyResult, curve_block_size, curve_registers, curve_shared_mem

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["occupancy_figure", "occupancy_markdown"]


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


def occupancy_markdown(r: OccupancyResult) -> str:
    """The occupancy answer as Markdown (``iotrace occupancy -o FILE.md``): the launch, each limit, the steps."""
    lines = ["# Occupancy (identity 6, modelled)", "",
             f"CC {r.cc}: {r.threads_per_block} threads ({r.warps_per_block} warps) per block, "
             f"{r.registers_per_thread} registers/thread, shared memory {r.smem_static} static + {r.smem_dynamic} "
             f"dynamic + {r.smem_reserved} reserved = {r.allocated_smem_per_block} B allocated, SM carveout "
             f"{r.smem_config // 1024} KB, {r.barriers} barrier(s).", "",
             "| limit | blocks/SM | |", "|---|---:|---|"]
    for name in LIMIT_NAMES:
        mark = "binds" if name in r.limiters else ("not used" if name in r.unlimited else "")
        lines.append(f"| {name} | {r.limits[name]} | {mark} |")
    lines += ["", *(f"- {step}" for step in r.steps), "",
              f"**occupancy = {r.occupancy_pct:.4g} %** ({r.active_warps_per_sm} of {r.max_warps_per_sm} warps, "
              f"{r.active_blocks_per_sm} blocks per SM), limited by {', '.join(r.limiters) or '—'}."]
    if r.reason:
        lines += ["", f"Cannot launch: {r.reason}"]
    return "\n".join(lines) + "\n"
