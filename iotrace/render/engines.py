"""The text of an engine comparison (``iotrace bench --engine``, schema ``iotrace.bench-engines/1``): plain dicts in,
text out; every number was computed in :mod:`iotrace.engines.compare`. A table, not a ranking."""

from __future__ import annotations

from typing import Any

from iotrace.identities import time_beyond_floor

__all__ = ["engines_rows", "engines_text", "profile_lines"]

_COLUMNS = ("engine", "device", "weights read", "MB/token", "decode tok/s", "wall here", "% of wall", "card wall",
            "prefill tok/s", "TTFT ms", "ITL p50/p90/p99 ms", "tokens vs transformers")


def _pm(spread: dict[str, Any] | None, digits: int = 1) -> str:
    """``mean ± standard deviation``; with one repetition the ± is n/a (a sample deviation needs two)."""
    if not spread:
        return "n/a"
    one = len(spread.get("values", ())) == 1
    return f"{spread['mean']:.{digits}f} ± {'n/a' if one else format(spread['stddev'], f'.{digits}f')}"


def _agreement(row: dict[str, Any]) -> str:
    a = row.get("agreement")
    if a is None:
        return "n/a (no reference)"
    if a["diverged_at"] is None:
        return f"identical {a['of']}/{a['of']}"
    margin = "no margin" if a["margin"] is None else f"margin {a['margin']:.3f}"
    if "near-tie" in a["verdict"]:
        kind = "near-tie"
    elif "within the" in a["verdict"]:
        kind = f"within spread {a['spread_before']:.3f}"
    elif "not a bug" in a["verdict"]:  # beyond the spread, from arithmetic the engine states (8-bit activations)
        kind = "beyond spread, 8-bit activations"
    else:
        kind = "NOT a tie"
    return f"same {a['identical_prefix']}/{a['of']}, then {kind} ({margin})"


def engines_rows(data: dict[str, Any]) -> list[tuple[str, ...]]:
    """One row per engine that ran, in :data:`_COLUMNS` order (failed engines are listed apart)."""
    rows = []
    for row in data["engines"]:
        if not row["ok"]:
            continue
        walls = row["walls"]
        here, card = walls["here"], walls["card"]
        decode = _pm(row["decode_tok_s"])
        if row.get("aggregate_tok_s") and row.get("concurrency", 1) > 1:
            decode = f"{_pm(row['aggregate_tok_s'])} ({row['concurrency']} streams)"
        card_cell = "n/a"
        if card is not None:
            card_cell = f"{card['tok_s']:.0f} ({card['card']})"
            if card["fraction"] is not None:
                card_cell += f" {100 * card['fraction']:.0f}%"
        itl = row["itl_ms"]
        rows.append((row["engine"], row["device"], row["weights"]["format"], f"{walls['bytes_per_step'] / 1e6:.1f}",
                     decode, "n/a" if here is None else f"{here['tok_s']:.1f}",
                     "n/a" if here is None else f"{100 * here['fraction']:.0f}%", card_cell,
                     _pm(row["prefill_tok_s"], 0), _pm(row["ttft_ms"]),
                     f"{itl['p50']:.1f}/{itl['p90']:.1f}/{itl['p99']:.1f}", _agreement(row)))
    return rows


def _largest_gaps(decode: dict[str, Any], labels: dict[str, str]) -> str:
    """The two largest gaps of a decode step (each row's time beyond its floor, ``PhaseFigures.gaps``), with their
    share of the step; recomputed from the rows where a result predates the saved ``gaps``."""
    span = decode.get("span_ns") or 0
    if "gaps" in decode:
        gaps = [(g["category"], g["ns"]) for g in decode["gaps"]]
    elif decode.get("gemm_floor_pct") is not None:
        gaps = time_beyond_floor(decode.get("categories_ns") or {}, {"gemm": decode["gemm_floor_pct"],
                                                                      "attention": decode.get("attention_floor_pct")})
    else:
        gaps = []
    return ", ".join(f"{labels.get(c, c)} {100 * ns / span:.0f}%" for c, ns in gaps[:2]) if span and gaps else "n/a"


def _waterfall_cells(row: dict[str, Any]) -> tuple[str, str]:
    """(trace % of wall, largest gaps) of a row's waterfall (``StepReport.to_dict``'s shape), for the table."""
    flow = row.get("waterfall")
    if not flow:
        return "n/a", "n/a"
    if flow.get("error"):
        return "n/a", f"not analysed: {flow['error']}"
    decode = next((p for p in flow.get("phases") or [] if p.get("phase") == "decode"), None)
    if decode is None:
        return "n/a", "no decode step found"
    pct = decode.get("pct_of_wall")
    return ("n/a" if pct is None else f"{pct:.0f}%"), _largest_gaps(decode, flow.get("categories") or {})


def _noise(cost: dict[str, Any]) -> str:
    """``, noise ±41%: within it``: two standard errors of the mean step's difference, and whether the change is
    within them (a loaded machine's steps vary more than a profiler costs)."""
    if cost.get("noise_pct") is None:
        return ""
    return f", noise ±{cost['noise_pct']:.0f}%{': within it' if cost['within_noise'] else ''}"


def profile_lines(data: dict[str, Any]) -> list[str]:
    """``--profile``: the folder, then per engine its trace and the profiler's cost (decode tok/s without and with it,
    from the same run), or why it has no trace."""
    profile = data.get("profile")
    if not profile:
        return []
    lines = [f"profiles in {profile['folder']} (with manifest.json: the model and this run's copy-loop bandwidth, for "
             "`iotrace report TRACE`):"]
    for row in data["engines"]:
        got = row.get("profile")
        if not row["ok"] or not got:
            continue
        if got.get("skipped"):
            lines.append(f"  {row['engine']}: no trace: {got['skipped']}")
            continue
        steps = ", ".join(f"{phase} {n}" for phase, n in got["steps_run"].items())
        cost = got.get("cost")
        said = ("profiler cost: n/a (a decode rate is missing)" if cost is None else
                f"profiler cost: decode {cost['decode_tok_s_unprofiled']:.1f} tok/s without, "
                f"{cost['decode_tok_s_profiled']:.1f} with ({cost['change_pct']:+.0f}%{_noise(cost)})")
        lines.append(f"  {row['engine']}: {got['trace']} · {said}; {got['reps']} profiled repetition(s) after "
                     f"{data['work']['reps']} without · steps run: {steps}")
    return lines


def _details(row: dict[str, Any]) -> str:
    if not row["ok"]:
        return f"{row['engine']}: no result ({row['python']}): {row['error']}"
    build = row["build"]
    parts = [f"{k} {v}" for k, v in build.items() if k not in ("engine", "system_info") and v not in (None, "")]
    env = row["environment"]
    timing = ", ".join(f"{k}: {v}" for k, v in row["timing"].items())
    stable = "" if row["tokens_stable"] else " · tokens differed between repetitions"
    lines = [f"{row['engine']}: {', '.join(parts)} · {env['python']} (Python {env['python_version']}, "
             f"{env['distributions']} distributions, freeze sha256 {env['freeze_sha256'][:12]}) · load "
             f"{row['load_s']:.1f} s{stable}",
             f"    timing: {timing}"]
    if build.get("system_info"):
        lines.append(f"    system info: {build['system_info'].strip()}")
    card = row["walls"]["card"]
    if card is not None and card.get("no_fraction"):
        lines.append(f"    card wall: no fraction: {card['no_fraction']}")
    lines.append(f"    rerun alone: {row['rerun']}")
    return "\n".join(lines)


def engines_text(data: dict[str, Any]) -> str:
    """The header, the side-by-side table, each engine's build and timing sources, and the reference."""
    model, work = data["model"], data["work"]
    head = [*data.get("labels", []),
            f"{model['name']} ({model['file_type']}, {model['params'] / 1e6:.1f} M params) · prompt "
            f"{data['prompt']['tokens']} tokens ({data['prompt']['source']}) · {work['gen_tokens']} decode steps · "
            f"{work['reps']} repetitions after a warm-up · greedy, EOS ignored · {work['threads']} CPU threads",
            "memory bandwidth of a copy loop in this run: " + (", ".join(
                f"{device.upper()} {gbs:.1f} GB/s" for device, gbs in data["bandwidth_gbs"].items() if gbs)
                or "not measured (no engine ran)")]
    columns, rows = _COLUMNS, engines_rows(data)
    if any(row.get("waterfall") for row in data["engines"]):  # the traces were analysed: where each step went
        columns = (*_COLUMNS, "trace % of wall", "largest gaps (decode)")
        rows = [(*cells, *_waterfall_cells(row)) for cells, row in zip(rows, [r for r in data["engines"] if r["ok"]],
                                                                      strict=True)]
    rows = [columns, *rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(columns))]
    table = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    ref = data["reference"]
    ref_line = (f"tokens vs transformers: each engine's {work['gen_tokens'] + 1} greedy token ids against "
                "transformers' eager fp32 run of the same folder; at a divergence, transformers' margin between its "
                "top two logits there, against the largest difference of the two engines' margins before it (a "
                "near-tie or a margin within that spread is arithmetic; beyond both, a bug where the engine has "
                "transformers' weights and dtype, and named, not called a bug, where its arithmetic differs)")
    if not ref["ok"]:
        ref_line = f"no reference tokens: transformers gave no result ({ref['error']})"
    notes = ["wall here: identity 1 (weights read once per token + the KV cache at the timed steps' mean context) "
             "against the copy bandwidth above; card wall: the same bytes at the card's CardBook bandwidth",
             ref_line]
    details = [_details(row) for row in data["engines"]]
    profiles = profile_lines(data)
    return "\n".join([*head, "", *table, "", *([*profiles, ""] if profiles else []), *notes, "", *details]) + "\n"
