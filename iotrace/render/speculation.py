"""Text and Markdown renderings of a speculative-decoding bench (``iotrace bench --spec``, schema
``iotrace.bench-spec/1``): plain dicts in, text out; every number was computed in :mod:`iotrace.model.spec_bench`."""

from __future__ import annotations

from typing import Any

__all__ = ["speculation_markdown", "speculation_rows", "speculation_text", "speedup_cell"]

_COLUMNS = ("prompt", "draft", "γ", "steps", "α", "acceptance by position", "tokens/step ± SE",
            "full-γ steps: α", "tokens/step ± SE", "identity 5 E", "z", "c", "verify/step", "identity 5 speedup",
            "speedup (95% CI)", "identical")
#: The speedup cell by verdict (the strings of iotrace.model.ab_stats and spec_bench.NO_PROPOSALS, spelled out: the
#: renderers sit below the model layer): a ratio whose interval holds 1 is never printed as a figure, one repetition
#: never as one, and a run that proposed nothing was plain decoding.
_CELLS = {"gain": "{mean} ({low} to {high})", "loss": "{mean} ({low} to {high}) loss",
          "within noise": "within noise ({low} to {high})",
          "cannot tell (one repetition)": "one repetition: cannot tell",
          "no draft tokens proposed": "no draft tokens proposed: this was plain decoding"}


def _f(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _curve(curve: list[dict[str, Any]]) -> str:
    return " ".join("·" if c["p"] is None else f"{c['p']:.2f}" for c in curve)


def speedup_cell(speedup: dict[str, Any]) -> str:
    """A run's ``speedup_interval`` as its table cell: the figure and interval only where it is beyond noise."""
    return _CELLS[speedup["verdict"]].format(**{k: _f(speedup[k]) for k in ("mean", "low", "high")})


def speculation_rows(data: dict[str, Any]) -> list[tuple[str, ...]]:
    """One row per prompt, draft and γ, in :data:`_COLUMNS` order."""
    rows = []
    for prompt in data["speculation"]["prompts"]:
        for draft in prompt["drafts"]:
            for r in draft["runs"]:
                tps = "n/a" if r["tokens_per_step"] is None else (
                    f"{r['tokens_per_step']:.2f} ± {_f(r['tokens_per_step_se'])}")
                full = "" if r["full_steps"] == r["steps"] else f" ({r['full_steps']} full)"
                full_tps = "n/a" if r["full_tokens_per_step"] is None else (
                    f"{r['full_tokens_per_step']:.2f} ± {_f(r['full_tokens_per_step_se'])}")
                identical = {True: "yes", False: "NO", None: "n/a"}[r["identical_to_plain"]]
                rows.append((prompt["key"], draft["draft"], str(r["gamma"]), f"{r['steps']}{full}", _f(r["alpha"]),
                             _curve(r["curve"]), tps, _f(r["full_alpha"]), full_tps,
                             _f(r["identity5_tokens_per_step"]), _f(r["identity5_z"], 1),
                             _f(r["draft_cost"], 3), _f(r["verify_cost"]), _f(r["identity5_speedup"]),
                             speedup_cell(r["speedup_interval"]), identical))
    return rows


def _best_lines(data: dict[str, Any]) -> list[str]:
    lines = []
    for prompt in data["speculation"]["prompts"]:
        for draft in prompt["drafts"]:
            b = draft["best_gamma"]
            if len(draft["runs"]) > 1:
                if b["measured"] is None:
                    measured = f"no best γ measured ({b['measured_reason']})"
                else:
                    ties = ", ".join(map(str, b["overlapping"]))
                    measured = f"best γ measured {b['measured']}" + (
                        f" (its interval overlaps γ = {ties}: not told apart)" if ties else "")
                lines.append(f"{prompt['key']} / {draft['draft']}: {measured}; identity 5 "
                             f"predicts {b['predicted'] if b['predicted'] is not None else 'n/a'} among those run "
                             f"({b['predicted_any'] if b['predicted_any'] is not None else 'n/a'} over 1-64) at "
                             f"α {_f(b['alpha'])}, c {_f(b['draft_cost'], 3)}")
    return lines


def speculation_text(data: dict[str, Any]) -> str:
    """The terminal table: a header, one row per prompt, draft and γ, the best γ lines and the estimators."""
    spec = data["speculation"]
    head = [*data.get("labels", []),
            f"{data['model']['name']} · {data['device']} · kernels {data['kernels']}, {data['dtype']} · "
            f"{spec['mode']}, {spec['gen_tokens']} tokens per run, batch 1",
            f"{spec['reps']} alternated repetition{'s' if spec['reps'] != 1 else ''} (plain, then each draft and γ); "
            "speedup: geometric mean of the per-repetition plain / speculative walls, 95% t-interval"]
    for prompt in spec["prompts"]:
        head.append(f"{prompt['key']} ({prompt['kind']}, {prompt['prompt_tokens']} prompt tokens; "
                    f"{prompt['source']}): plain step {prompt['plain']['step_ms']:.1f} ms, "
                    f"wall {prompt['plain']['wall_s']:.2f} s (mean of {len(prompt['plain']['wall_s_reps'])})")
    rows = [_COLUMNS, *speculation_rows(data)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS))]
    table = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    notes = [f"{k}: {v}" for k, v in spec["estimators"].items()]
    return "\n".join([*head, "", *table, "", *_best_lines(data), "", *notes]) + "\n"


def speculation_markdown(data: dict[str, Any]) -> str:
    """The same rows as a Markdown table (for the published note)."""
    rows = speculation_rows(data)
    out = ["| " + " | ".join(_COLUMNS) + " |", "|" + "---|" * len(_COLUMNS)]
    out += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(out) + "\n"
