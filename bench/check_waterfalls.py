"""GPU validation (issue 43 item 8): every engine trace `iotrace bench --engine … --profile DIR` wrote has steps, and
each step's waterfall sums to the step. ``python bench/check_waterfalls.py DIR`` prints one line per trace with its
decode figures and exits 1 on a trace without steps or a waterfall that does not sum."""

from __future__ import annotations

import sys
from pathlib import Path

from iotrace.trace import load
from iotrace.trace.reports.step_report import step_report
from iotrace.trace.reports.step_roles import CATEGORIES


def main(folder: Path) -> int:
    traces = sorted(folder.glob("*.pt.trace.json.gz"))
    if not traces:
        print(f"check_waterfalls: no *.pt.trace.json.gz in {folder}", file=sys.stderr)
        return 1
    failed = 0
    for path in traces:
        report = step_report(load(path))
        if report is None:
            print(f"{path.name}: no steps found", file=sys.stderr)
            failed += 1
            continue
        frame = report.waterfall.frame
        summed = frame[[f"{c}_ns" for c in CATEGORIES]].sum(axis=1)
        bad = int((summed != frame["span_ns"]).sum())
        failed += bad > 0
        decode = next((p for p in report.phases if p.phase == "decode"), None)
        shares = "" if decode is None else ", ".join(f"{c} {100 * decode.share(c):.0f}%" for c in CATEGORIES
                                                     if decode.share(c) >= 0.05)
        print(f"{path.name}: {len(report.steps)} steps {report.steps.phases()} ({report.waterfall.device}); "
              f"{bad} waterfall(s) not summing; decode: {shares}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
