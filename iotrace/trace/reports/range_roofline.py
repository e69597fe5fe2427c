"""Per-range rooflines: for each NVTX / ``record_function`` range name, its kernels' time, FLOPs and bytes,
achieved against attainable on the card, and occupancy — the kernel breakdown by annotation range that HTA users ask
for (facebookresearch/HolisticTraceAnalysis issue #180).

A kernel belongs to every range open on its launching thread when the launching call began, by the one join the
timeline's "time per NVTX range" uses too (:func:`iotrace.trace.reports.range_kernels.range_kernels`, which cites
Nsight Systems' NVTX GPU projection and PyTorch's profiler for the rule), so the two tables give a range the same
kernel time: ``kernel_ns`` and ``launches`` are *inclusive* of nested ranges, and a range name that nests inside
itself counts each kernel once; ``self_ns`` is *exclusive*, the time of the kernels launched directly inside the
range. Ranges are grouped by name, as the timeline groups them; kernels outside every range make one ``(no range)``
row, so in-range time plus it is the trace's.

FLOPs and bytes per kernel come, best first, from the file's counters (the kernel roofline's reading of them,
:func:`~iotrace.trace.reports.roofline.roofline_point`), from a kernel plugin's cost model (``--plugin`` with
``--shape``, :func:`~iotrace.trace.reports.plugin_costs.match_plugins`), or from the cost model of the shaped op
that launched it (:func:`~iotrace.trace.reports.op_roofline.op_cost`; an op's cost is split over its kernels by
their time). A range's attainable is identity 4 per kernel summed as time: each covered kernel's fastest time on the
roof is FLOPs / min(peak, I · B) (bytes / B with no FLOPs, FLOPs / peak with no bytes), and % of attainable is the
sum of those times over the kernels' measured time — for one kernel, achieved / attainable exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from iotrace.trace.nvtx_join import PATH_SEPARATOR
from iotrace.trace.reports.metricview import MetricView
from iotrace.trace.reports.occupancy import ESTIMATED, occupancy_row
from iotrace.trace.reports.op_roofline import op_cost
from iotrace.trace.reports.range_kernels import range_kernels
from iotrace.trace.reports.roofline import roofline_point

if TYPE_CHECKING:
    from iotrace.cards import Card
    from iotrace.trace.reports.plugin_costs import KernelModel, PluginMatch
    from iotrace.trace.tables import TraceTables

__all__ = ["NO_RANGE", "RANGE_COLUMNS", "RangeRooflines", "plugin_models_by_launch", "range_rooflines"]

#: The row of the kernels launched outside every range.
NO_RANGE = "(no range)"
RANGE_COLUMNS = ["range", "path", "paths", "depth", "depth_max", "calls", "launches", "kernel_ns", "self_ns",
                 "share_pct", "flops", "flops_source", "flops_covers_pct", "bytes", "bytes_source",
                 "bytes_covers_pct", "achieved_flop_per_s", "achieved_bytes_per_s", "attainable_flop_per_s",
                 "pct_of_attainable", "roof_basis", "roof_covers_pct", "occupancy_pct", "occupancy_basis",
                 "occupancy_covers_pct"]
INCLUSIVE = ("inclusive: a range's kernels include those of the ranges nested in it (self, self_ns: those launched "
             "directly in it), so rows overlap")

_COUNTERS, _PLUGIN, _OP = "counters", "plugin cost model", "op cost model"
_BOTH, _FLOPS_ONLY, _BYTES_ONLY = ("identity 4 (FLOPs and bytes)", "compute peak (no bytes: a lower bound on % of "
                                   "attainable)", "DRAM bandwidth (no FLOPs)")


@dataclass(frozen=True)
class RangeRooflines:
    """The per-range table (:data:`RANGE_COLUMNS`, largest kernel time first, ``(no range)`` last) and its cut."""

    table: pd.DataFrame
    #: Range names with at least one kernel, before ``top`` cut them.
    ranges_total: int
    top: int
    #: All measured kernel time of the trace, and the part launched inside some range (None: no durations).
    kernel_ns: float | None
    in_ranges_ns: float | None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def shown(self) -> int:
        return int((self.table["range"] != NO_RANGE).sum()) if len(self.table) else 0

    def title(self) -> str:
        """What the table holds, in words, with the cut: "Range rooflines (3 ranges by kernel time, inclusive)"."""
        total, shown = self.ranges_total, self.shown
        cut = f"showing {shown} of {total} ranges by kernel time; --top {total} shows all" if total > shown else \
            f"{shown} range{'s' * (shown != 1)} by kernel time"
        return f"Range rooflines ({cut}; inclusive)"

    def to_dict(self) -> dict[str, Any]:
        return {"inclusive": True, "grouped_by": "range name", "note": INCLUSIVE, "ranges_total": self.ranges_total,
                "ranges_shown": self.shown, "top": self.top, "kernel_ns": self.kernel_ns,
                "in_ranges_ns": self.in_ranges_ns, "notes": list(self.notes),
                "rows": [{k: _plain(v) for k, v in row.items()} for row in self.table.to_dict("records")]}


def _plain(value: Any) -> Any:
    """A JSON-ready cell: NaN and pandas' NA become None, numpy numbers plain numbers."""
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return None
    return value.item() if isinstance(value, np.generic) else value


def plugin_models_by_launch(selection: pd.DataFrame, match: PluginMatch) -> dict[int, KernelModel]:
    """Kernel id → plugin cost model for every launch a costed row of ``selection`` stands for (its ``launch_ids``
    where the rows group launches), not only the launch that represents the row."""
    launch_ids = selection["launch_ids"] if "launch_ids" in selection else selection["id"].map(lambda k: [k])
    return {int(launch): match.models[int(kid)] for kid, launches in zip(selection["id"], launch_ids, strict=True)
            if int(kid) in match.models for launch in launches}


def range_rooflines(tables: TraceTables, card: Card | None, *, view: MetricView | None = None,
                    ceilings: str = "auto", plugin_models: Mapping[int, KernelModel] | None = None,
                    top: int = 20) -> RangeRooflines | None:
    """One row per range name (inclusive, see the module docstring) and a ``(no range)`` row; the ``top`` names by
    kernel time. None when the trace has no CPU-side ranges or no kernels.

    :param view: the trace's metrics per launch (built here when not given; not a view of grouped launches).
    :param ceilings: as :func:`~iotrace.trace.reports.roofline.roofline_point` takes it, for counted kernels.
    :param plugin_models: kernel id → plugin cost model (:func:`plugin_models_by_launch`).
    """
    join = range_kernels(tables)
    ranges = join.ranges
    kernels = tables.kernels
    if ranges.empty or kernels.empty:
        return None
    view = view if view is not None else MetricView(tables.metrics)
    per = _kernel_values(tables, card, view, ceilings, plugin_models or {})
    codes, home, uniques = join.codes, join.home, join.names
    # Each kernel once per name (a name nested in itself counts a kernel once), and the kernels outside every range.
    kern, group = join.name_pairs()
    outside = np.flatnonzero(home < 0)
    no_range = len(uniques)
    pairs = pd.DataFrame({"kernel": np.concatenate([kern, outside]),
                          "group": np.concatenate([group, np.full(len(outside), no_range)])})
    rows = _aggregate(pairs, per)
    # Kernel time, launches and self time per name straight from the shared join: the timeline's table takes them
    # from there too.
    times = join.times(per["dur"], per["launches"])
    durations = per["dur"]
    total = float(np.nansum(durations)) if (~np.isnan(durations)).any() else None
    inside = durations[home >= 0]
    in_ranges = float(np.nansum(inside)) if (~np.isnan(inside)).any() else None
    structure = _structure(ranges, codes, join.parent, ranges["name"].astype("object").to_numpy(), join.kernel,
                           join.instance, per["dur"])
    out = []
    for g, row in rows.items():
        if g == no_range:
            label = {"range": NO_RANGE, "path": None, "paths": None, "depth": None, "depth_max": None, "calls": None,
                     "self_ns": row["kernel_ns"]}
        else:
            shared = times.loc[g]
            row = {**row, "kernel_ns": _float(shared["kernel_ns"]), "launches": int(shared["launches"])}
            label = {"range": str(uniques[g]), **structure[g], "self_ns": _float(shared["self_ns"])}
        out.append(_row(label, row, total, per["reasons"]))
    frame = pd.DataFrame(out, columns=RANGE_COLUMNS)
    frame = frame.astype({c: "Int64" for c in ("paths", "depth", "depth_max", "calls")})
    named = frame[frame["range"] != NO_RANGE]
    order = named.assign(_t=named["kernel_ns"].fillna(-1.0)).sort_values(["_t", "launches"], ascending=False,
                                                                          kind="stable")
    frame = pd.concat([order.head(top).drop(columns="_t"), frame[frame["range"] == NO_RANGE]], ignore_index=True)
    notes = []
    if named.empty:
        notes.append("no kernel was launched inside a range: kernels are joined to the ranges open on their "
                     "launching thread through the launching API call (correlation id), which these kernels lack"
                     if kernels["correlation_id"].isna().all() else
                     "no kernel was launched inside a range on its launching thread")
    if (ranges["kind"] == "start/end").any():
        notes.append(f"{int((ranges['kind'] == 'start/end').sum())} start/end ranges are not joined to kernels: "
                     "they do not nest on a thread")
    return RangeRooflines(frame.reset_index(drop=True), len(named), top, total, in_ranges, tuple(notes))


def _structure(ranges: pd.DataFrame, codes: np.ndarray, parent: np.ndarray, names: np.ndarray, kern: np.ndarray,
               inst: np.ndarray, durations: np.ndarray) -> dict[int, dict[str, Any]]:
    """Per range name: the path of its instance with the most kernel time, how many distinct paths it has, its
    depths and how many times it was opened."""
    depth = ranges["depth"].fillna(0).astype("int64").to_numpy()
    paths = np.array(names, dtype=object, copy=True)
    for level in range(1, int(depth.max()) + 1 if len(depth) else 0):  # parents first: depth order
        at = np.flatnonzero((depth == level) & (parent >= 0))
        paths[at] = [f"{paths[p]}{PATH_SEPARATOR}{n}" for p, n in zip(parent[at].tolist(), names[at].tolist(),
                                                                        strict=True)]
    weight = np.nan_to_num(durations[kern]) if len(kern) else np.zeros(0)
    inst_ns = np.bincount(inst, weights=weight, minlength=len(ranges))
    frame = pd.DataFrame({"g": codes, "path": paths, "ns": inst_ns, "depth": depth})
    best = frame.sort_values("ns", ascending=False, kind="stable").drop_duplicates("g").set_index("g")["path"]
    stats = frame.groupby("g").agg(paths=("path", "nunique"), depth=("depth", "min"), depth_max=("depth", "max"),
                                   calls=("path", "size"))
    return {int(g): {"path": str(best[g]), "paths": int(s.paths), "depth": int(s.depth),
                     "depth_max": int(s.depth_max), "calls": int(s.calls)} for g, s in stats.iterrows()}


def _aggregate(pairs: pd.DataFrame, per: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Sums per group over the (kernel, group) pairs: launches, time, FLOPs, bytes and the time they cover, roof
    time, occupancy × time; and the labels of where the values came from."""
    k = pairs["kernel"].to_numpy()
    dur, flops, nbytes, tmin = per["dur"][k], per["flops"][k], per["bytes"][k], per["tmin"][k]
    occ = per["occ"][k]
    timed = ~np.isnan(dur)
    roof = timed & ~np.isnan(tmin)
    frame = pd.DataFrame({
        "group": pairs["group"].to_numpy(), "launches": per["launches"][k], "kernel_ns": dur,
        "flops": flops, "flops_t": np.where(timed, flops, np.nan), "flops_ns": np.where(~np.isnan(flops), dur, np.nan),
        "bytes": nbytes, "bytes_t": np.where(timed, nbytes, np.nan),
        "bytes_ns": np.where(~np.isnan(nbytes), dur, np.nan),
        "tmin_s": np.where(roof, tmin, np.nan), "roof_ns": np.where(roof, dur, np.nan),
        "roof_flops": np.where(roof, flops, np.nan), "roof_no_flops": (roof & np.isnan(flops)).astype(np.int64),
        "occ_w": np.where(timed, occ * dur, np.nan), "occ_ns": np.where(timed & ~np.isnan(occ), dur, np.nan),
    })
    sums = frame.groupby("group").sum(min_count=1)  # a sum of nothing stays missing, never 0
    labels = {}
    for column in ("flops_label", "bytes_label", "roof_label", "occ_label"):
        found = pd.DataFrame({"group": pairs["group"].to_numpy(), "label": per[column][k]}).dropna()
        labels[column] = found.drop_duplicates().groupby("group")["label"].agg(lambda s: " + ".join(sorted(s)))
    out = {}
    for g, row in sums.iterrows():
        values = {c: _float(row[c]) for c in sums.columns}
        values.update({c: labels[c].get(g) for c in labels})
        out[int(g)] = values
    return out


def _row(label: dict[str, Any], v: dict[str, Any], total: float | None, reasons: dict[str, str]) -> dict[str, Any]:
    """One output row from a group's sums (:func:`_aggregate`)."""
    time = v["kernel_ns"]

    def covers(ns: float | None) -> float | None:
        return 100.0 * (ns or 0.0) / time if time else None

    def per_second(amount: float | None, ns: float | None) -> float | None:
        return amount / (ns / 1e9) if amount is not None and ns else None

    pct = 100.0 * v["tmin_s"] / (v["roof_ns"] / 1e9) if v["tmin_s"] is not None and v["roof_ns"] else None
    attainable = v["roof_flops"] / v["tmin_s"] if v["roof_flops"] is not None and v["tmin_s"] and \
        not v["roof_no_flops"] else None
    occupancy = v["occ_w"] / v["occ_ns"] if v["occ_w"] is not None and v["occ_ns"] else None
    return {**label, "launches": int(v["launches"] or 0), "kernel_ns": time,
            "share_pct": 100.0 * time / total if time is not None and total else None,
            "flops": v["flops"], "flops_source": v["flops_label"] or reasons["flops"],
            "flops_covers_pct": covers(v["flops_ns"]) if v["flops"] is not None else None,
            "bytes": v["bytes"], "bytes_source": v["bytes_label"] or reasons["bytes"],
            "bytes_covers_pct": covers(v["bytes_ns"]) if v["bytes"] is not None else None,
            "achieved_flop_per_s": per_second(v["flops_t"], v["flops_ns"]),
            "achieved_bytes_per_s": per_second(v["bytes_t"], v["bytes_ns"]),
            "attainable_flop_per_s": attainable, "pct_of_attainable": pct,
            "roof_basis": v["roof_label"] if pct is not None else reasons["roof"],
            "roof_covers_pct": covers(v["roof_ns"]) if pct is not None else None,
            "occupancy_pct": occupancy, "occupancy_basis": v["occ_label"] if occupancy is not None else
            reasons["occupancy"], "occupancy_covers_pct": covers(v["occ_ns"]) if occupancy is not None else None}


def _float(value: Any) -> float | None:
    return None if value is None or value is pd.NA or value != value else float(value)


# --- per kernel ----------------------------------------------------------------------------------------------------

def _kernel_values(tables: TraceTables, card: Card | None, view: MetricView, ceilings: str,
                   plugin_models: Mapping[int, KernelModel]) -> dict[str, Any]:
    """Per kernel (positions of ``tables.kernels``): duration, launches, FLOPs, bytes, fastest time on the roof,
    occupancy, the label of each, and why a value is missing trace-wide."""
    kernels = tables.kernels
    n = len(kernels)
    model_card = None if ceilings == "file" else card  # a cost model has no file ceilings: the card's, unless barred
    out: dict[str, Any] = {
        "dur": kernels["duration_ns"].to_numpy(dtype=np.float64, na_value=np.nan),
        "launches": kernels["launches"].to_numpy(dtype=np.int64),
        "flops": np.full(n, np.nan), "bytes": np.full(n, np.nan), "tmin": np.full(n, np.nan),
        **{c: np.full(n, None, dtype=object) for c in ("flops_label", "bytes_label", "roof_label")}}
    ids = kernels["id"].to_numpy(dtype=np.int64)
    names = kernels["name"].astype("object").to_numpy()
    launches = out["launches"]
    counted = np.zeros(n, dtype=bool)
    with_counters = np.flatnonzero([bool(view.of(int(kid))) for kid in ids]) if view else np.zeros(0, np.int64)
    for i in with_counters.tolist():
        mean = out["dur"][i] / max(int(launches[i]), 1)
        point, _ = roofline_point(view, int(ids[i]), str(names[i]), None if np.isnan(mean) else float(mean), card,
                                  ceilings)
        if point is None or (point.flops is None and point.dram_bytes is None):
            continue
        counted[i] = True
        scale = max(int(launches[i]), 1)
        dram = point.level("dram")
        _put(out, i, None if point.flops is None else point.flops * scale,
             None if point.dram_bytes is None else point.dram_bytes * scale, _COUNTERS, point.peak_flop_per_s,
             None if dram is None else dram.ceiling_bytes_per_s)
    for i, kid in enumerate(ids.tolist()):
        model = plugin_models.get(kid)
        if model is None or counted[i]:
            continue
        counted[i] = True
        scale = max(int(launches[i]), 1)
        peak, bandwidth = _card_roof(model_card, model.cost.peak)
        _put(out, i, model.cost.flops * scale, model.cost.bytes * scale, f"{_PLUGIN} ({model.plugin})", peak,
             bandwidth)
    _op_values(tables, model_card, out, counted)
    occ, occ_label = _occupancy(tables, card, view)
    out["occ"], out["occ_label"] = occ, occ_label
    out["reasons"] = _reasons(tables, view, plugin_models, card)
    return out


def _put(out: dict[str, Any], i: int, flops: float | None, nbytes: float | None, source: str, peak: float | None,
         bandwidth: float | None) -> None:
    """Record one kernel's FLOPs and bytes and its fastest time on the roof (identity 4, see the module)."""
    from iotrace import identities as ident

    if flops is not None:
        out["flops"][i], out["flops_label"][i] = flops, source
    if nbytes is not None:
        out["bytes"][i], out["bytes_label"][i] = nbytes, source
    if flops and nbytes and peak and bandwidth:
        out["tmin"][i] = flops / ident.attainable_flop_per_s(flops / nbytes, peak, bandwidth)
        out["roof_label"][i] = _BOTH
    elif flops and peak:
        out["tmin"][i], out["roof_label"][i] = flops / peak, _FLOPS_ONLY
    elif nbytes and bandwidth:
        out["tmin"][i], out["roof_label"][i] = nbytes / bandwidth, _BYTES_ONLY


def _card_roof(card: Card | None, peak_key: str) -> tuple[float | None, float | None]:
    if card is None:
        return None, None
    peak = card.peak_flop_per_s(peak_key) if peak_key in card.peak_tflops else None
    return peak, card.bandwidth_bytes_per_s if card.memory_bandwidth_gbs is not None else None


def _op_values(tables: TraceTables, card: Card | None, out: dict[str, Any], counted: np.ndarray) -> None:
    """FLOPs and bytes of the kernels of shaped ops a plugin covers (``kernels.op_id``), each op's cost split over
    its timed kernels by time (evenly where none is timed), for the kernels no counter or plugin covered."""
    if not tables.rows("ops"):
        return
    op_ids = tables.kernels["op_id"].to_numpy(dtype=np.float64, na_value=np.nan)
    usable = ~np.isnan(op_ids) & ~counted
    if not usable.any():
        return
    ops = tables.ops.set_index("id")
    positions = pd.Series(np.flatnonzero(usable)).groupby(op_ids[usable].astype(np.int64)).agg(list)
    for op_id, members in positions.items():
        if op_id not in ops.index:
            continue
        op = ops.loc[op_id]
        model = op_cost(op["name"], op["input_dims"], op["input_types"])
        if model is None:
            continue
        where = np.array(members, dtype=np.int64)
        times = out["dur"][where]
        share = times / np.nansum(times) if (~np.isnan(times)).any() and np.nansum(times) > 0 else \
            np.full(len(where), 1.0 / len(where))
        peak, bandwidth = _card_roof(card, model.cost.peak)
        for i, part in zip(where.tolist(), np.nan_to_num(share).tolist(), strict=True):
            _put(out, i, model.cost.flops * part, model.cost.bytes * part, f"{_OP} ({model.plugin})", peak,
                 bandwidth)


def _occupancy(tables: TraceTables, card: Card | None, view: MetricView) -> tuple[np.ndarray, np.ndarray]:
    """Per kernel the best occupancy the file supports (measured achieved, else CUPTI's estimate, else theoretical
    from the launch resources) and its label, from :func:`~iotrace.trace.reports.occupancy.occupancy_row`; kernels
    without counters are computed once per distinct launch record."""
    kernels = tables.kernels
    n = len(kernels)
    values, labels = np.full(n, np.nan), np.full(n, None, dtype=object)
    if not n:
        return values, labels
    ccs = _device_ccs(tables, card)
    keys = ["device", "block_x", "block_y", "block_z", "registers_per_thread", "static_smem_bytes",
            "dynamic_smem_bytes", "smem_bytes", "achieved_occupancy_pct", "est_achieved_occupancy_pct",
            "theoretical_occupancy_pct"]
    has_metrics = np.array([bool(view.of(int(k))) for k in kernels["id"]], dtype=bool) if view else np.zeros(n, bool)
    frame = kernels.assign(_own=np.where(has_metrics, np.arange(n), -1))
    for _, members in frame.groupby([*keys, "_own"], dropna=False, sort=False).indices.items():
        row = kernels.iloc[members[0]]
        device = row["device"]
        cc = ccs.get(None if pd.isna(device) else int(device), ccs.get(None))
        occ, _ = occupancy_row(row, view, cc)
        if occ.achieved_pct is not None:
            value = occ.achieved_pct
            label = "estimated by CUPTI" if occ.achieved_source.startswith(ESTIMATED) else "achieved (measured)"
        elif occ.theoretical_pct_file is not None or occ.theoretical_pct is not None:
            from_file = occ.theoretical_pct_file is not None
            value = occ.theoretical_pct_file if from_file else occ.theoretical_pct
            label = "theoretical (ncu)" if from_file else "theoretical (iotrace calculator, launch resources)"
        else:
            continue
        values[members], labels[members] = value, label
    return values, labels


def _device_ccs(tables: TraceTables, card: Card | None) -> dict[int | None, str | None]:
    """Compute capability per device, and under None the fallback: the first device's, else the card's."""
    devices = tables.devices.dropna(subset=["cc"])
    out: dict[int | None, str | None] = {int(d): str(cc) for d, cc in zip(devices["device"], devices["cc"],
                                                                           strict=True) if pd.notna(d)}
    out[None] = str(devices["cc"].iloc[0]) if len(devices) else (card.cc if card is not None else None)
    return out


def _reasons(tables: TraceTables, view: MetricView, plugin_models: Mapping[int, KernelModel],
             card: Card | None) -> dict[str, str]:
    """Why a range has no FLOPs, bytes, roof or occupancy, in the trace's terms ("none: ..."), never a silent 0."""
    counters = "its kernels have no FLOP counters" if view else \
        "no hardware counters in the trace (profile with ncu, or torch.profiler's CUPTI range profiler)"
    ops = "no shaped op a plugin covers launched them" if tables.rows("ops") else \
        "no op input shapes (torch.profiler record_shapes=True)"
    plugin = "" if plugin_models else "; no --plugin with --shape"
    bytes_counters = "its kernels have no DRAM byte counters (dram__bytes)" if view else \
        "no hardware counters in the trace"
    no_card = "" if card is not None else "; no card for the ceilings (pass --card NAME)"
    return {"flops": f"none: {counters}; {ops}{plugin}", "bytes": f"none: {bytes_counters}; {ops}{plugin}",
            "roof": f"none: no timed kernel with FLOPs or bytes and a ceiling{no_card}",
            "occupancy": "none: no timed kernel with an achieved, estimated or theoretical occupancy"}
