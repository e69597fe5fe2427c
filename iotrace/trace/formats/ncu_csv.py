"""Nsight Compute CSV (``ncu --csv``): the ``--page details`` long form and the ``--page raw`` wide form.

Details: one row per (launch, metric) with ``Metric Name``, ``Metric Unit``, ``Metric Value``. Raw: one row per
launch, one column per metric, units either in a second row (``ncu --csv --page raw``) or absent. Both may follow
``==PROF==`` lines and program output; numbers may carry thousands separators (``"32,746,880"``). Identity
columns are named in ``iotrace/data/trace_fields.toml`` (``ncu.csv_columns``); metric names fill kernel columns
through ``ncu.kernel_metrics``, with ``gpu__time_duration`` scaled to ns by its unit (``ncu.time_units``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd

from iotrace.trace.devices import with_cards
from iotrace.trace.errors import TraceFormatError
from iotrace.trace.fields import fields
from iotrace.trace.formats import _sniff
from iotrace.trace.formats._csv import find_header, number, read_rows
from iotrace.trace.parser import Head
from iotrace.trace.tables import TraceTables, build

DETAILS = _sniff.NCU_DETAILS
RAW = _sniff.NCU_RAW
_DIMS = re.compile(r"^\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)$")


class NcuCsvParser(_sniff.NcuCsv):
    """Reads the format :class:`iotrace.trace.formats._sniff.NcuCsv` declares."""

    def parse(self, head: Head) -> TraceTables:
        path = head.path
        rows = read_rows(path, head.gzipped)
        at = find_header(rows, RAW)
        if at is None:
            raise TraceFormatError(path, "has no ncu CSV header (columns ID and Kernel Name)",
                                   "export with ncu --csv --page details or --page raw")
        header = [c.strip() for c in rows[at]]
        body = rows[at + 1:]
        if set(header) >= DETAILS:
            return _details(path, header, body)
        return _raw(path, header, body)


def _meta(page: str) -> dict[str, Any]:
    return {"format": "ncu-csv", "tool": "Nsight Compute", "version": None, "schema": f"ncu --csv --page {page}",
            "notes": ["ncu CSV states no tool version"]}


def _cell(row: list[str], header: list[str], name: str) -> str | None:
    try:
        return row[header.index(name)]
    except (ValueError, IndexError):
        return None


def _launch(path: Path, header: list[str], row: list[str], kid: int) -> dict[str, Any]:
    if len(row) != len(header):
        raise TraceFormatError(path, f"row of launch {kid} has {len(row)} fields, the header {len(header)}",
                               "the file is truncated or damaged")
    out: dict[str, Any] = {"id": kid, "name": _cell(row, header, "Kernel Name")}
    if not out["name"]:
        raise TraceFormatError(path, f"launch {kid} has no kernel name", "the file is damaged")
    for column, label in (("context", "Context"), ("stream", "Stream"), ("device", "Device")):
        text = _cell(row, header, label)
        out[column] = number(text) if text is not None else None
    for column, label in (("grid", "Grid Size"), ("block", "Block Size")):
        match = _DIMS.match((_cell(row, header, label) or "").strip())
        if match:
            out.update({f"{column}_{axis}": int(match.group(i + 1)) for i, axis in enumerate("xyz")})
    return out


def _apply(spec: dict[str, Any], launch: dict[str, Any], metric: str, unit: str, value: float) -> None:
    column = spec["kernel_metrics"].get(metric)
    if column is None:
        return
    if column == "duration_ns":
        scale = spec["time_units"].get(unit.strip() or "nsecond")
        if scale is None:
            return
        value *= scale
    launch[column] = value


def _details(path: Path, header: list[str], body: list[list[str]]) -> TraceTables:
    spec = fields("ncu")
    launches: dict[str, dict[str, Any]] = {}
    metrics: list[tuple[int, str, str, float]] = []
    cc: dict[str, str] = {}
    for row in body:
        if row[0].startswith("==") and len(row) < len(header):
            continue  # ==PROF== / ==WARNING== lines after the table
        launch_id = _cell(row, header, "ID") or ""
        if launch_id not in launches:
            launches[launch_id] = _launch(path, header, row, len(launches))
        elif len(row) != len(header):
            raise TraceFormatError(path, f"a row of launch {launch_id} has {len(row)} fields, the header "
                                         f"{len(header)}", "the file is truncated or damaged")
        launch = launches[launch_id]
        cc.setdefault(str(launch.get("device")), (_cell(row, header, "CC") or "").strip())
        metric = (_cell(row, header, "Metric Name") or "").strip()
        unit = (_cell(row, header, "Metric Unit") or "").strip()
        try:
            value = number(_cell(row, header, "Metric Value") or "")
        except ValueError:
            text = (_cell(row, header, "Metric Value") or "").strip().lower()
            if text in ("nan", "inf", "-inf", "infinity") or text.replace(",", "").replace(".", "").isdigit():
                raise TraceFormatError(path, f"launch {launch_id} metric {metric} has value {text!r}",
                                       "the file is damaged") from None
            continue  # a string metric (cache config, a name): not a number, not in metrics
        if value is None or not metric:
            continue
        metrics.append((launch["id"], metric, unit, value))
        _apply(spec, launch, metric, unit, value)
    if not launches:
        raise TraceFormatError(path, "has an ncu CSV header but no rows", "the export is empty; profile again")
    return build(path, kernels=pd.DataFrame(list(launches.values())),
                 metrics=pd.DataFrame(metrics, columns=["kernel_id", "metric", "unit", "value"]),
                 devices=_devices(launches.values(), cc), meta=_meta("details"))


def _raw(path: Path, header: list[str], body: list[list[str]]) -> TraceTables:
    spec = fields("ncu")
    identity = set(spec["csv_columns"])
    metric_columns = [(i, name) for i, name in enumerate(header) if name not in identity and name]
    if not metric_columns:
        raise TraceFormatError(path, "has an ncu CSV header with no metric columns",
                               "export with ncu --csv --page raw (or --page details)")
    units = [""] * len(header)
    if body and not (_cell(body[0], header, "ID") or "").strip():
        units, body = [c.strip() for c in body[0]] + [""] * (len(header) - len(body[0])), body[1:]
    launches: list[dict[str, Any]] = []
    metrics: list[tuple[int, str, str, float]] = []
    cc: dict[str, str] = {}
    for row in body:
        if row[0].startswith("=="):
            continue
        launch = _launch(path, header, row, len(launches))
        cc.setdefault(str(launch.get("device")), (_cell(row, header, "CC") or "").strip())
        for index, metric in metric_columns:
            try:
                value = number(row[index])
            except ValueError:
                text = row[index].strip().lower()
                if text in ("nan", "inf", "-inf", "infinity"):
                    raise TraceFormatError(path, f"launch {launch['id']} metric {metric} has value {text!r}",
                                           "the file is damaged") from None
                continue
            if value is None:
                continue
            metrics.append((launch["id"], metric, units[index], value))
            _apply(spec, launch, metric, units[index], value)
        launches.append(launch)
    if not launches:
        raise TraceFormatError(path, "has an ncu CSV header but no rows", "the export is empty; profile again")
    return build(path, kernels=pd.DataFrame(launches),
                 metrics=pd.DataFrame(metrics, columns=["kernel_id", "metric", "unit", "value"]),
                 devices=_devices(launches, cc), meta=_meta("raw"))


def _devices(launches: Any, cc: dict[str, str]) -> list[dict[str, Any]]:
    """The CSV names no GPU, only an id and a compute capability: no card can be inferred from it."""
    rows: dict[Any, dict[str, Any]] = {}
    for launch in launches:
        device = launch.get("device")
        if device is not None and device not in rows:
            text = cc.get(str(device), "")
            rows[device] = {"device": device, "cc": text or None, "vendor": "nvidia"}
    return with_cards(list(rows.values()))

