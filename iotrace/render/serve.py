"""The text and the Pareto chart of a serving sweep (``iotrace bench serve``, schema ``iotrace.bench-serve/1``):
plain dicts in, text or a plotly figure out; every number was computed in :mod:`iotrace.engines.serve_sweep`.
A table per curve, not a ranking."""

from __future__ import annotations

from typing import Any

__all__ = ["pareto_figure", "serve_text"]

_COLUMNS = ("point", "rep", "ok/failed", "req/s", "out tok/s", "wall tok/s", "% of wall", "tok/s/user",
            "user wall", "TTFT p50/p99 ms", "TPOT p50/p99 ms", "ITL p99 ms", "E2E p50 ms", "goodput req/s")


def _f(value: Any, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _pct(value: Any) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def _row(p: dict[str, Any]) -> tuple[str, ...]:
    if p.get("completed") == 0 and p.get("error") and p.get("failed") is None:  # a point that never ran
        return (p["label"], str(p["rep"] + 1), "not run", *(["—"] * (len(_COLUMNS) - 3)))
    decode = (p.get("walls") or {}).get("decode") or {}
    return (p["label"], str(p["rep"] + 1), f"{p['completed']}/{p['failed']}", _f(p.get("request_throughput"), 2),
            _f(p.get("output_throughput")), _f(decode.get("tok_s")),
            "above" if decode.get("no_fraction") else _pct(decode.get("fraction")),
            "bursts" if p.get("burst_requests") else _f(p.get("output_token_throughput_per_user")),
            _f(decode.get("per_user_tok_s")),
            f"{_f(p.get('median_ttft_ms'), 0)}/{_f(p.get('p99_ttft_ms'), 0)}",
            f"{_f(p.get('median_tpot_ms'))}/{_f(p.get('p99_tpot_ms'))}", _f(p.get("p99_itl_ms")),
            _f(p.get("median_e2el_ms"), 0), _f(p.get("request_goodput"), 2) if p.get("goodput_slo_ms") else "n/a")


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    rows = [_COLUMNS, *rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def _curve_lines(curve: dict[str, Any]) -> list[str]:
    server = curve.get("server") or {}
    head = f"{curve['label']}"
    if server:
        ready = f", ready in {server['ready_s']:.0f} s" if server.get("ready_s") is not None else ""
        head += f" · {server.get('version') or 'version unknown'} · model {server.get('model')}{ready}"
    if curve.get("weights"):
        head += f" · reads {curve['weights']['label']} ({curve['weights']['weight_bytes'] / 1e6:,.0f} MB)"
    lines = [head]
    if curve.get("error"):
        lines.append(f"  no figures: {curve['error']}")
    if curve["points"]:
        lines += [f"  {line}" for line in _table([_row(p) for p in curve["points"]])]
    for p in curve["points"]:
        if p.get("error"):
            lines.append(f"  {p['label']} (rep {p['rep'] + 1}): {p['error']}")
        if p.get("burst_requests"):
            lines.append(f"  {p['label']} (rep {p['rep'] + 1}): {p['burst_requests']} of {p['completed']} requests "
                         "were paced faster than one stream's wall allows: their tokens were held back and sent in a "
                         "burst, so TPOT and tok/s/user time the delivery, not the decode steps")
        no_fraction = ((p.get("walls") or {}).get("decode") or {}).get("no_fraction")
        if no_fraction:
            lines.append(f"  {p['label']} (rep {p['rep'] + 1}): no % of wall: {no_fraction}")
        reasons = sorted({e for e in p.get("errors") or [] if e})
        if reasons:
            lines.append(f"  {p['label']} (rep {p['rep'] + 1}) failed requests: {'; '.join(reasons)[:300]}")
    if server.get("argv"):
        lines.append(f"  server: {' '.join(server['argv'])}")
    return lines


def serve_text(data: dict[str, Any]) -> str:
    """The header, one table per curve (each point beside its walls), the flags' effects and how to read them."""
    model, work = data["model"], data["work"]
    slo = work.get("slo_ms")
    head = [f"{model['name']} ({model['file_type']}, {model['params'] / 1e6:.1f} M params) · "
            f"{work['input_tokens']} prompt tokens ({work['prompts']}) · {work['output_tokens']} output tokens, "
            f"greedy, EOS ignored · {work['reps']} repetition(s) · points {', '.join(work['points'])}"
            + (f" · SLO {', '.join(f'{k} {v:g} ms' for k, v in slo.items())}" if slo else ""),
            f"machine: {data['machine']} · memory bandwidth: "
            + (f"{data['bandwidth_gbs']:.1f} GB/s ({data['bandwidth_source']})" if data.get("bandwidth_gbs")
               else "unknown (no wall: give --card)")]
    if data.get("machine") == "CPU":
        head.insert(0, "CPU figures of each engine's CPU build (no GPU here): not GPU results")
    lines = [*head, ""]
    for curve in data["curves"]:
        lines += [*_curve_lines(curve), ""]
    effects = data.get("flag_effects") or []
    if effects:
        lines.append("flags against the same engine's first curve (output tok/s, mean of repetitions, 95% interval):")
        for e in effects:
            half = "" if e["ci95_tok_s"] is None else f" ± {e['ci95_tok_s']:.1f}"
            lines.append(f"  {e['engine']} {' '.join(e['flags']) or '(defaults)'} at {e['point']}: "
                         f"{e['change_tok_s']:+.1f}{half} tok/s ({e['change_pct']:+.0f}%): {e['verdict']}")
        lines.append("")
    lines.append("wall tok/s: identity 1 at the point's batch b (the mean requests in flight for a rate), b · B / "
                 "(weights + b · KV at the mean context); user wall: B / (weights + b · KV). out tok/s counts "
                 "prefills and queueing too, so its % of the wall is a floor on the decode steps'.")
    if data.get("interrupted"):
        lines.append(f"interrupted ({data.get('interrupted_by', 'Ctrl-C')}): the points above are those that finished; "
                     "the servers were stopped")
    return "\n".join(lines) + "\n"


def _mean_by_label(points: list[dict[str, Any]], key: str) -> dict[str, float]:
    """Each label's mean of ``key`` over its repetitions, in sweep order."""
    found: dict[str, list[float]] = {}
    for p in points:
        if p.get(key) is not None:
            found.setdefault(p["label"], []).append(p[key])
    return {label: sum(v) / len(v) for label, v in found.items()}


#: plotly's default qualitative colours (plotly.colors.qualitative.Plotly): a curve and its wall share one.
_COLOURS = ("#636EFA", "#EF553B", "#00CC96", "#AB63FA", "#FFA15A", "#19D3F3", "#FF6692", "#B6E880")


def pareto_figure(data: dict[str, Any]) -> Any:
    """Tok/s per user (1 / median TPOT) against output tok/s in all, each point the mean of its repetitions: a line
    per curve through its points, and beside it, dashed in its colour, the wall for what that server reads at b = 1 …
    the largest concurrency. Both axes logarithmic: the walls sit an order of magnitude out on a CPU."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for i, curve in enumerate(data["curves"]):
        colour = _COLOURS[i % len(_COLOURS)]
        # a point whose tokens arrived in bursts has no per-user rate to draw (its TPOT times the delivery)
        points = [p for p in curve["points"] if not p.get("burst_requests")]
        x = _mean_by_label(points, "output_throughput")
        y = _mean_by_label(points, "output_token_throughput_per_user")
        labels = [label for label in x if label in y]
        if labels:
            fig.add_scatter(x=[x[k] for k in labels], y=[y[k] for k in labels], mode="lines+markers+text",
                            text=labels, textposition="top right", name=curve["label"],
                            line={"color": colour}, textfont={"size": 10})
        wall = curve.get("wall_curve") or []
        if wall:
            fig.add_scatter(x=[w["tok_s"] for w in wall], y=[w["per_user_tok_s"] for w in wall], mode="lines",
                            name=f"wall: {(curve.get('weights') or {}).get('label')} at {data['bandwidth_gbs']:.0f} "
                                 "GB/s (identities 1, 3)", line={"dash": "dash", "color": colour})
    fig.update_layout(title=f"{data['model']['name']} served on {data['machine']}: tok/s per user against tok/s in "
                            "all, beside the batched decode wall",
                      xaxis_title="output tok/s in all (log)", yaxis_title="tok/s per user, 1 / median TPOT (log)",
                      template="plotly_white", width=1000, height=640)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return fig
