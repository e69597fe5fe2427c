"""The self-check's results as Markdown: the environment, then one section and one table per step."""

from __future__ import annotations

import json
from typing import Any

from iotrace.selfcheck.record import SelfcheckResult

_MARK = {"ok": "ok", "failed": "**FAILED**", "skipped": "skipped"}


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        value = json.dumps(value, separators=(",", ":"))
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(rows: list[dict[str, Any]]) -> list[str]:
    columns = list(dict.fromkeys(key for row in rows for key in row))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(row.get(c)) for c in columns) + " |" for row in rows]
    return lines


def render(result: SelfcheckResult) -> str:
    env = result.environment
    lines = [f"# iotrace self-check — {result.ran_on} ({result.mode}"
             f"{', quick' if result.quick else ''})", "",
             f"Overall: {'ok' if result.ok else '**FAILED**'} in {result.seconds:.0f} s.", "",
             "| what | value |", "|---|---|"]
    lines += [f"| {key} | {_cell(value)} |" for key, value in env.items()]
    for number, step in enumerate(result.steps, 1):
        lines += ["", f"## {number}. {step.name} — {_MARK[step.status]} ({step.seconds:.1f} s)"]
        if step.reason:
            lines += ["", step.reason]
        if step.figures:
            lines += ["", "Figures: " + ", ".join(f"{k} = {_cell(v)}" for k, v in step.figures.items())]
        if step.rows:
            lines += ["", *_table(step.rows)]
    return "\n".join(lines) + "\n"
