"""Note: concurrent streams — the pinned model behind vLLM's and llama.cpp's own servers under load, on this CPU,
every point beside the batched decode wall.

Read from the two sweeps this project recorded with ``iotrace bench serve`` in ``traces/concurrent-streams/`` (the
engines at 1, 2, 4 and 8 streams, twice each; llama.cpp's flash attention off and on, three times each): every figure
is read from those files or worked from them by the code ``bench serve`` prints with, so the note is rebuilt exactly.
"""

from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path
from typing import Any

from iotrace.notes.document import Image, Note, table

__all__ = ["FLAGS", "SWEEP", "bend", "build"]

TRACES = Path(__file__).resolve().parents[2] / "traces" / "concurrent-streams"
SWEEP = TRACES / "engines.json"
FLAGS = TRACES / "llama-cpp-flags.json"
#: A curve has bent where doubling the streams raises the output tok/s by less than this: past it, more streams buy
#: each user latency, not the server throughput (the knee of the Pareto chart). 25% is a quarter of the gain a
#: perfectly batched, memory-bound step would give (2x), wide enough that the two repetitions' spread does not move it.
BEND_GAIN = 0.25


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def _points(curve: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """A curve's points by label, its repetitions together, in sweep order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for p in curve["points"]:
        out.setdefault(p["label"], []).append(p)
    return out


def _mean(points: list[dict[str, Any]], key: str) -> float | None:
    values = [p[key] for p in points if p.get(key) is not None]
    return statistics.fmean(values) if values else None


def _wall(points: list[dict[str, Any]], key: str) -> float | None:
    values = [p["walls"]["decode"][key] for p in points if (p.get("walls") or {}).get("decode", {}).get(key)]
    return statistics.fmean(values) if values else None


def _f(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def bend(curve: dict[str, Any]) -> str | None:
    """The first concurrency whose doubling gained less than :data:`BEND_GAIN` output tok/s (mean of the
    repetitions); None where every step up still gained more."""
    rows = [(ps[0]["max_concurrency"], _mean(ps, "output_throughput")) for ps in _points(curve).values()
            if ps[0].get("max_concurrency")]
    for (c, rate), (_, after) in itertools.pairwise(rows):
        if rate and after is not None and after < rate * (1 + BEND_GAIN):
            return f"c={c}"
    return None


def _curve_table(curve: dict[str, Any]) -> str:
    rows = []
    for label, ps in _points(curve).items():
        out = [p["output_throughput"] for p in ps if p.get("output_throughput")]
        wall, user_wall = _wall(ps, "tok_s"), _wall(ps, "per_user_tok_s")
        bursts = sum(p.get("burst_requests") or 0 for p in ps)
        user = "bursts" if bursts else _f(_mean(ps, "output_token_throughput_per_user"))
        rows.append([label, f"{sum(p['completed'] for p in ps)}/{sum(p['failed'] for p in ps)}",
                     f"{_f(statistics.fmean(out))} ± {_f(statistics.stdev(out) if len(out) > 1 else 0.0)}",
                     _f(wall), "—" if not wall else f"{100 * statistics.fmean(out) / wall:.0f}%", user,
                     _f(user_wall), _f(_mean(ps, "median_ttft_ms"), 0), _f(_mean(ps, "median_tpot_ms"))])
    return table(["streams", "ok/failed", "out tok/s", "wall tok/s", "% of wall", "tok/s/user", "user wall",
                  "TTFT p50 ms", "TPOT p50 ms"], rows)


def _effects_table(effects: list[dict[str, Any]]) -> str:
    rows = [[" ".join(e["flags"]), " ".join(e["against"]) or "(defaults)", e["point"], f"{e['change_tok_s']:+.1f}",
             "—" if e["ci95_tok_s"] is None else f"± {e['ci95_tok_s']:.1f}", f"{e['change_pct']:+.0f}%", e["verdict"]]
            for e in effects]
    return table(["flags", "against", "point", "Δ out tok/s", "95% interval", "Δ %", "verdict"], rows)


def build(images: bool = True) -> Note:
    """The note from the two committed sweeps."""
    from iotrace.render.serve import pareto_figure

    sweep, flags = _load(SWEEP), _load(FLAGS)
    model, work = sweep["model"], sweep["work"]
    curves = {c["engine"]: c for c in sweep["curves"]}
    note = Note("concurrent-streams", "Concurrent streams: two engines' servers under load, beside the batched wall", {
        "model": f"{model['name']} ({model['file_type']} GGUF, {model['params'] / 1e6:.1f} M params), each engine "
                 "reading it as it serves it",
        "sweeps": f"`traces/concurrent-streams/` (recorded here: `{sweep['manifest'].get('rerun')}`; "
                  f"`{flags['manifest'].get('rerun')}`)",
        "machine": f"{sweep['machine']}, {sweep['bandwidth_gbs']:.1f} GB/s ({sweep['bandwidth_source']})",
        "kind": "measured (the sweeps); the walls modelled (identities 1 and 3)"})
    note.add("method", "How to read a point",
             f"Each point is {work['input_tokens']}-token prompts (windows of the shipped text, a different one per "
             f"request) answered with {work['output_tokens']} tokens, greedy with EOS ignored, by N streams back to "
             "back (a closed loop), after one warm-up request per stream. A decode step of b streams reads every "
             "weight once and each stream's own KV cache, so the wall in all is b · B / (weights + b · KV) and each "
             "stream's B / (weights + b · KV): batching shares the weights' read, not the caches'. "
             + "; ".join(f"{e} reads {c['weights']['label']} ({c['weights']['weight_bytes'] / 1e9:.2f} GB a step)"
                         for e, c in curves.items() if c.get("weights"))
             + ": the same model has a wall per engine. "
             "The output tok/s counts the prefills and the queueing too, so its share of the wall is a floor on the "
             "decode steps'.")
    for engine, curve in curves.items():
        server = curve.get("server") or {}
        knee = bend(curve)
        note.add(f"curve-{engine.replace('.', '-')}", f"{engine} ({server.get('version')})",
                 f"{len(curve['points'])} points ({work['reps']} repetitions of each); "
                 + (f"the curve bends at {knee}: doubling the streams past it gains less than "
                    f"{100 * BEND_GAIN:.0f}% output tok/s" if knee else
                    f"the curve has not bent by the last point: each doubling of the streams gained at least "
                    f"{100 * BEND_GAIN:.0f}% output tok/s")
                 + f". Server: `{' '.join(server.get('argv') or [])}`.",
                 _curve_table(curve))
    png = "concurrent-streams-pareto.png"
    note.add("pareto", "Tokens per second per user against tokens per second in all",
             "Each engine's points (the mean of their repetitions) and, dashed in its colour, the wall for what it "
             "reads: up and to the right is better, and the dashed line is the most the bandwidth allows at each "
             "batch. Both axes are logarithmic.",
             f"![the Pareto chart](img/{png})" if images else "")
    llama = flags["curves"]
    note.add("flags", "What a flag bought: llama.cpp's flash attention",
             f"{llama[1]['label']} against {llama[0]['label']}, {flags['work']['reps']} repetitions of each point; "
             "the change in output tok/s with its 95% interval (Welch), within noise where the interval holds zero.",
             _effects_table(flags["flag_effects"]))
    if images:
        note.images.append(Image(png, pareto_figure(sweep), "the Pareto chart"))
    return note
