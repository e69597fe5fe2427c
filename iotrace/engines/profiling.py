"""``iotrace bench --engine … --profile DIR``: the folder of traces, each engine's profile figures, and the manifest
kept beside the traces.

Each engine that can be traced records one more repetition after its timed ones (the runner's
``engine_common.PROFILED_REPS``) into ``DIR/<engine>.pt.trace.json.gz``; its decode tok/s with the profiler against
the timed repetitions' mean without it is the profiler's cost, measured in the same process on the same work.
``DIR/manifest.json`` holds what a later ``iotrace report DIR/<engine>.pt.trace.json.gz`` needs to put the steps
beside their walls: the bench's manifest (argv, versions, device, git), the model's shape and the bytes per weight
the traced engines read (key ``wall``, read by :func:`iotrace.model.step_model.from_manifest`), and the memory
bandwidth the copy loop measured in the run.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from iotrace.errors import InvalidValueError

__all__ = ["MANIFEST", "RESULT", "default_folder", "prepare_folder", "profile_cost", "profile_manifest",
           "write_manifest", "write_result"]

#: The manifest's file name inside the profile folder (iotrace report looks for it beside a trace).
MANIFEST = "manifest.json"
#: The whole engine comparison (``iotrace.bench-engines/1``), kept beside the traces it explains.
RESULT = "bench-engines.json"


def default_folder(now: float | None = None) -> Path:
    """``./iotrace-profile-<YYYYmmdd-HHMMSS>``: a new folder where ``--profile`` names none."""
    return Path(f"iotrace-profile-{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}")


def prepare_folder(folder: Path) -> Path:
    """``folder`` made (with its parents) and checked writable, as an absolute path (the engines' children write into
    it from their own working directory). One :class:`InvalidValueError` line for a file, or a folder that cannot
    be made or written."""
    if folder.exists() and not folder.is_dir():
        raise InvalidValueError(f"--profile {folder} is a file, not a folder", "name a folder (made if missing)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".iotrace-write-check-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the name
        raise InvalidValueError(f"--profile {folder}: cannot write there ({getattr(exc, 'strerror', None) or exc})",
                                "name a writable folder") from None
    return folder.resolve()


def profile_cost(profile: dict[str, Any], timed: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """Decode tok/s without and with the profiler and the change in percent (negative: slower with it); with the timed
    repetitions' records (``step_s`` per repetition), the noise that change is read against: two standard errors of
    the difference of the mean decode step time, profiled against unprofiled (Welch's, over the steps), in percent of
    the unprofiled mean step. None where the engine wrote no trace or either rate is missing."""
    import statistics

    before, after = profile.get("decode_tok_s_unprofiled"), profile.get("decode_tok_s_profiled")
    if not before or not after:
        return None
    out: dict[str, Any] = {"decode_tok_s_unprofiled": before, "decode_tok_s_profiled": after,
                           "change_pct": 100.0 * (after / before - 1.0), "noise_pct": None, "within_noise": None}
    plain = [s for r in timed or [] for s in r["step_s"]]
    traced = [s for r in profile.get("profiled_reps") or [] for s in r["step_s"]]
    if len(plain) > 1 and len(traced) > 1:
        se = (statistics.variance(plain) / len(plain) + statistics.variance(traced) / len(traced)) ** 0.5
        out["noise_pct"] = 100.0 * 2 * se / statistics.fmean(plain)
        out["within_noise"] = abs(statistics.fmean(traced) - statistics.fmean(plain)) <= 2 * se
    return out


def _wall(row: dict[str, Any], config: Any, bandwidth: dict[str, float | None]) -> dict[str, Any]:
    """What the step report's wall needs of one traced engine (keys of ``step_model.from_manifest``)."""
    weights = row["weights"]
    measured = bandwidth.get(row["device"])
    return {"name": config.name, "params": config.params, "bytes_per_weight": weights["bytes"] / config.params,
            "bits": 8.0 * weights["bytes"] / config.params, "weight_bytes": weights["bytes"],
            "format": weights["format"], "layers": config.layers, "kv_heads": config.kv_heads,
            "head_dim": config.head_dim, "hidden": config.hidden, "kv_bytes_per_value": weights["kv_element_bytes"],
            "bandwidth_bytes_per_s": measured,
            # where the copy loop ran: the report says "copy loop in <this>"
            "bandwidth_source": f"this bench run ({row['device'].upper()}, iotrace bench --profile)" if measured
            else None}


def profile_manifest(data: dict[str, Any], config: Any, bandwidth: dict[str, float | None]) -> dict[str, Any]:
    """The manifest kept beside the traces: the bench's manifest, plus ``wall`` (the first traced engine's: the torch
    engines share ``--dtype``), each engine's trace, wall and profile figures, the model, the prompt and the work."""
    engines: dict[str, Any] = {}
    for row in data["engines"]:
        profile = row.get("profile")
        if not row["ok"] or not profile:
            continue
        entry: dict[str, Any] = {"device": row["device"], "skipped": profile.get("skipped")}
        if profile.get("trace"):
            entry.update(trace=os.path.basename(profile["trace"]), wall=_wall(row, config, bandwidth),
                         steps_run=profile["steps_run"], reps=profile["reps"], cost=row["profile"].get("cost"))
        engines[row["engine"]] = entry
    walls = [e["wall"] for e in engines.values() if e.get("wall")]
    return {**data["manifest"], "wall": walls[0] if walls else None, "engines": engines,
            "model": {**data["model"], "layers": config.layers, "kv_heads": config.kv_heads,
                      "head_dim": config.head_dim, "hidden": config.hidden},
            "bandwidth_bytes_per_s": dict(bandwidth),
            "bandwidth_source": "copy loop in this run (iotrace.model.copy_bandwidth)",
            "prompt": data["prompt"], "work": data["work"]}


def write_manifest(folder: Path, manifest: dict[str, Any]) -> Path:
    """``folder/manifest.json`` (:func:`profile_manifest`); its path."""
    return _write(folder / MANIFEST, manifest)


def write_result(folder: Path, data: dict[str, Any]) -> Path:
    """``folder/bench-engines.json``: the whole comparison beside the traces it explains; its path."""
    return _write(folder / RESULT, data)


def _write(path: Path, value: Any) -> Path:
    try:
        path.write_text(_json(value), encoding="utf-8")
    except OSError as exc:
        raise InvalidValueError(f"cannot write {path} ({exc.strerror or exc})", "name a writable --profile folder") \
            from None
    return path


def _json(value: Any) -> str:
    """Strict JSON (a number that is not finite as null; paths and the like as text), as ``--json`` prints."""

    def finite(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: finite(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [finite(x) for x in v]
        return v

    return json.dumps(finite(value), indent=2, default=str, allow_nan=False) + "\n"
