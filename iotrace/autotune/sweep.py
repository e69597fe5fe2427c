"""Recorded sweeps: a table of config -> measured time, with the compiled resources, for offline strategy studies.

``iotrace tune KERNEL --strategy exhaustive --record SWEEP.json`` writes one on a GPU; ``--replay SWEEP.json``
answers measurements from it with no GPU, so strategies are compared on real sweeps (the metric: the fraction of
the brute-force best reached against evaluations spent, :func:`iotrace.autotune.replay.curve`). The file says how
it was produced (``provenance.how``): measured on a named GPU, or synthesised, and by which command.

Format (JSON, ``format = "iotrace-sweep"``, ``version = 1``)::

    {"format", "version", "kernel", "backend", "dtype", "shape", "card": {fingerprint},
     "provenance": {"how", "command", "iotrace", "triton", "date", ...},
     "rows": [{"config", "resources": [Resources.to_dict()], "measured_us", "verified", "note"}]}

A row whose config did not compile has ``resources = []``; one that could not launch keeps its resources.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iotrace.compiler import Resources
from iotrace.errors import DataFileError

__all__ = ["FORMAT", "VERSION", "Sweep", "SweepRow", "load_sweep", "resources_from_dict", "says_synthesised"]

FORMAT = "iotrace-sweep"
VERSION = 1


def says_synthesised(how: str | None) -> bool:
    """Whether a sweep's ``provenance.how`` says its times were synthesised (bench/synth_sweeps.py writes so), not
    measured on a GPU."""
    return how is not None and "synthesi" in how.lower()


@dataclass(frozen=True)
class SweepRow:
    config: dict[str, Any]
    resources: list[dict[str, Any]]
    measured_us: float | None
    verified: bool | None
    note: str = ""


@dataclass
class Sweep:
    kernel: str
    backend: str
    dtype: str
    shape: dict[str, int]
    card: dict[str, Any]
    provenance: dict[str, Any]
    rows: list[SweepRow] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "kernel": self.kernel, "backend": self.backend,
                "dtype": self.dtype, "shape": self.shape, "card": self.card, "provenance": self.provenance,
                "rows": [{"config": r.config, "resources": r.resources, "measured_us": r.measured_us,
                          "verified": r.verified, "note": r.note} for r in self.rows]}

    def save(self, path: Path) -> None:
        try:
            Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")
        except OSError as exc:
            raise DataFileError(f"cannot write the sweep {path} ({exc.strerror})", "choose a writable path") from exc

    @property
    def how(self) -> str:
        """How the sweep was made, in its own words (``provenance.how``)."""
        return str(self.provenance.get("how", ""))

    @property
    def synthesised(self) -> bool:
        """Whether the sweep says its times were synthesised, not measured."""
        return says_synthesised(self.how)

    @property
    def best_us(self) -> float:
        """The brute-force best: the fastest verified time in the sweep."""
        times = [r.measured_us for r in self.rows if r.measured_us is not None and r.verified is not False]
        if not times:
            raise DataFileError(f"the {self.kernel} sweep has no verified measurement", "record it again on a GPU")
        return min(times)


def resources_from_dict(data: dict[str, Any]) -> Resources:
    fields = {k: v for k, v in data.items() if k in Resources.__dataclass_fields__}
    fields["grid"] = tuple(fields["grid"])
    return Resources(**fields)


def load_sweep(path: Path) -> Sweep:
    """Read and check a recorded sweep; a file that is not one says which field is wrong."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataFileError(f"no sweep file {path}", "record one with `iotrace tune ... --record FILE` on a GPU") \
            from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataFileError(f"{path} is not a readable sweep ({exc})", "pass a file written by --record") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise DataFileError(f"{path} is not an iotrace sweep (format is not {FORMAT!r})",
                            "pass a file written by `iotrace tune --record`")
    if data.get("version") != VERSION:
        raise DataFileError(f"{path} is sweep version {data.get('version')!r}; this iotrace reads {VERSION}",
                            "record it again with this iotrace")
    try:
        rows = [SweepRow(dict(r["config"]), list(r["resources"]), r["measured_us"], r["verified"], r.get("note", ""))
                for r in data["rows"]]
        for row in rows:
            for res in row.resources:
                resources_from_dict(res)
        sweep = Sweep(data["kernel"], data["backend"], data["dtype"], dict(data["shape"]), dict(data["card"]),
                      dict(data["provenance"]), rows)
    except (KeyError, TypeError, ValueError) as exc:
        raise DataFileError(f"{path}: a sweep field is missing or malformed ({exc!r})",
                            "pass a file written by `iotrace tune --record`") from exc
    if not rows:
        raise DataFileError(f"{path} holds no rows", "record the sweep again")
    return sweep
