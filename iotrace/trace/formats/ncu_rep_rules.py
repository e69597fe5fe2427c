"""Nsight Compute's stored rule results (its guided analysis) as rows of the ``rules`` table.

``IAction.rule_results_as_dicts()`` returns each launch's results as ``ncu_report`` builds them from the report's
payload; every well-formed result becomes a row, a malformed one is left out and named once in a note, so one
damaged launch never costs the others their rules.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

__all__ = ["MSG_TYPES", "NO_RULES", "SPEEDUP_TYPES", "launch_rules", "rule_rows", "rules_note"]

#: How the note for a report without rule results begins (:func:`iotrace.trace.reports.ncu_rules.rules_status`).
NO_RULES = "the file stores no Nsight Compute rule results"
#: NvRules ``MsgType`` numbers as ``ncu_report`` defines them (``MsgType_NONE`` ... ``MsgType_ERR`` = 0 ... 4) and
#: their words; meanings in the NvRules API, https://docs.nvidia.com/nsight-compute/NvRulesAPI/index.html (MsgType:
#: OK informative, OPTIMIZATION a performance suggestion, WARNING a fixable issue, ERROR a failure, e.g. of the rule).
MSG_TYPES: dict[int, str] = {0: "none", 1: "ok", 2: "optimization", 3: "warning", 4: "error"}
#: ``IFrontend.SpeedupType`` numbers (``ncu_report.SpeedupType_UNKNOWN/LOCAL/GLOBAL`` = 0/1/2). Same page: LOCAL is the
#: gain in hardware efficiency for the problem taken alone, GLOBAL the cut in the whole workload's runtime. 0 (unknown)
#: has no word.
SPEEDUP_TYPES: dict[int, str] = {1: "local", 2: "global"}
#: A speedup estimate is a percentage (0-100 in every corpus report); far beyond this the payload is damaged.
_SPEEDUP_LIMIT = 1e6


def rules_note(path: Path, kid: int, problem: str) -> str:
    """The note for launch ``kid`` of ``path`` whose rule results could not be read."""
    return (f"{path.name}: rule results of launch #{kid} could not be read ({problem}): the rest of the report is "
            "unaffected")


def launch_rules(action: Any, kid: int) -> tuple[list[dict[str, Any]], str | None]:
    """One launch's ``rules`` rows and what was wrong with its payload (None: nothing)."""
    try:
        dicts = action.rule_results_as_dicts()
    except Exception as exc:  # a SWIG-wrapped C++ error or an error in ncu_report's Python wrapper
        return [], f"ncu_report raised {type(exc).__name__}: {' '.join(str(exc).split())[:120]}"
    return rule_rows(kid, dicts)


def rule_rows(kid: int, dicts: Any) -> tuple[list[dict[str, Any]], str | None]:
    """Rows of the ``rules`` table from one launch's ``rule_results_as_dicts()``: every well-formed result becomes a
    row; the others are left out and the first problem is returned (None where every result was read)."""
    if not isinstance(dicts, (list, tuple)):
        return [], f"ncu_report returned {type(dicts).__name__}, not a list"
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    for i, result in enumerate(dicts):
        try:
            rows.append(_rule_row(kid, result))
        except ValueError as exc:
            problems.append(f"result {i + 1} of {len(dicts)}: {exc}")
    if not problems:
        return rows, None
    return rows, problems[0] + (f"; {len(problems) - 1} more left out" if len(problems) > 1 else "")


def _rule_row(kid: int, result: Any) -> dict[str, Any]:
    """One result as a ``rules`` row; ValueError says what is malformed. Keys as ``rule_results_as_dicts`` documents
    them; ``rule_message``, ``focus_metrics`` and ``speedup_estimation`` may be absent (older ncu, rules without)."""
    if not isinstance(result, dict):
        raise ValueError(f"a {type(result).__name__}, not a dict")
    rule_id = _text(result, "rule_identifier")
    if not rule_id:
        raise ValueError("an empty rule_identifier")
    title = message = message_type = None
    stored = result.get("rule_message")
    if stored is not None:
        stored = _dict(stored, "rule_message")
        title, message = _text(stored, "title") or None, _text(stored, "message") or None
        message_type = _int(stored, "type")
    focus = result.get("focus_metrics", [])
    if not isinstance(focus, list):
        raise ValueError(f"focus_metrics is {type(focus).__name__}, not a list")
    focus_rows = []
    for metric in focus:
        metric = _dict(metric, "a focus metric")
        value = _number(metric, "value")
        focus_rows.append({"name": _text(metric, "name"), "value": value if math.isfinite(value) else None,
                           "severity": _int(metric, "severity"), "info": _text(metric, "info")})
    speedup = speedup_type = None
    estimate = result.get("speedup_estimation")  # ncu 2023.x on, and only from rules that estimate one
    if estimate is not None:
        estimate = _dict(estimate, "speedup_estimation")
        speedup = _number(estimate, "speedup")
        if not (math.isfinite(speedup) and abs(speedup) <= _SPEEDUP_LIMIT):
            raise ValueError(f"speedup_estimation.speedup is {speedup!r}, not a percentage")
        speedup_type = SPEEDUP_TYPES.get(_int(estimate, "type"))
    return {"kernel_id": kid, "rule_id": rule_id, "rule_name": _text(result, "name"),
            "section": _text(result, "section_identifier"), "message_type": message_type,
            "severity": None if message_type is None else MSG_TYPES.get(message_type), "title": title,
            "message": message, "focus_metrics": json.dumps(focus_rows), "speedup": speedup,
            "speedup_type": speedup_type}


def _dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} is {type(value).__name__}, not a dict")
    return value


def _field(stored: dict[str, Any], key: str) -> Any:
    if key not in stored:
        raise ValueError(f"no {key!r}")
    return stored[key]


def _text(stored: dict[str, Any], key: str) -> str:
    value = _field(stored, key)
    if not isinstance(value, str):
        raise ValueError(f"{key} is {value!r:.40}, not text")
    return value


def _int(stored: dict[str, Any], key: str) -> int:
    value = _field(stored, key)
    # bool is an int to Python but no enum value ncu stores; enums are small.
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31:
        raise ValueError(f"{key} is {value!r:.40}, not an enum number")
    return value


def _number(stored: dict[str, Any], key: str) -> float:
    value = _field(stored, key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{key} is {value!r:.40}, not a number")
    return float(value)
