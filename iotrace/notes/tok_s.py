"""Note: where the tok/s went — an engine's trace read step by step against the wall.

Two readings of the same kind: a real vLLM V1 serving trace of a Llama-3-70B-class model on four H100s from the corpus
(its decode steps against identity 1 at tensor parallelism 4), then the pinned model (SmolLM2-135M, fp32) through
iotrace's reference decoder, transformers and vLLM's CPU build on the machine that recorded the traces in
``traces/where-the-tok-s-went/`` (``iotrace bench --engine … --profile``; the copy loop's bandwidth in its
manifest.json is the CPU's wall). Every figure is read from those files by the code `iotrace report` runs, so the note
is rebuilt exactly from them.
"""

from __future__ import annotations

from pathlib import Path

from iotrace.model_shapes import model
from iotrace.notes.document import Note, table
from iotrace.trace.reports.step_roles import CATEGORIES

#: The corpus trace (PROVENANCE.md: vLLM V1, 4x H100 80GB HBM3, TP 4, a 1,049-token prefill then 9 decode steps).
H100_TRACE = "kineto/h100sxm_x4tp_vllm_v1_llama3-70b_prefill1049_decode9_rank0_kineto.json.gz"
#: The traces this project recorded of the pinned model, one per engine, with the run's manifest.
OWN_TRACES = Path(__file__).resolve().parents[2] / "traces" / "where-the-tok-s-went"
ENGINES = ("iotrace", "transformers", "vllm")
RECORD = ("iotrace bench --engine iotrace --engine transformers --engine vllm --gen-tokens 8 --reps 2 "
          "--profile traces/where-the-tok-s-went")


def _phase_table(report) -> str:
    rows = []
    for p in report.phases:
        rows.append([p.phase, p.steps, f"{p.median_ms:.3g}", "—" if p.tokens_per_step is None else
                     f"{p.tokens_per_step:g}", "—" if p.tok_s is None else f"{p.tok_s:.4g}",
                     "—" if p.wall_tok_s is None else f"{p.wall_tok_s:.4g}",
                     "—" if p.pct_of_wall is None else f"{p.pct_of_wall:.0f}%"])
    return table(["phase", "steps", "median ms", "tokens/step", "tok/s", "wall tok/s", "% of wall"], rows)


def _waterfall_table(report, phase: str) -> str:
    p = next(x for x in report.phases if x.phase == phase)
    beyond = dict(p.gaps())
    rows = [[report.labels[c], f"{p.categories_ns[c] / 1e6 / p.steps:.3g}", f"{100 * p.share(c):.1f}%",
             f"{100 * beyond.get(c, 0) / p.span_ns:.1f}%" if beyond else "—"]
            for c in CATEGORIES if p.categories_ns[c]]
    rows.append(["the step (sum)", f"{p.span_ns / 1e6 / p.steps:.3g}", "100.0%",
                 f"{100 * sum(beyond.values()) / p.span_ns:.1f}%" if beyond else "—"])
    return table(["where each step's time went", "ms/step", "% of step", "beyond its floor"], rows)


def _h100(corpus: Path):
    from iotrace.trace import load
    from iotrace.trace.reports.step_report import StepModel, StepOptions, machine_of, step_report

    tables = load(corpus / H100_TRACE)
    shape = model("llama-3-70b")
    given = StepModel(shape.name, shape.params, 2.0, "models.toml (bf16)", layers=shape.layers,
                      kv_heads=shape.kv_heads, head_dim=shape.head_dim, hidden=shape.hidden, kv_bytes_per_value=2.0)
    return step_report(tables, StepOptions(model=given, machine=machine_of(tables), batch=1))


def _own(engine: str):
    from iotrace.model.step_model import step_options
    from iotrace.trace import load
    from iotrace.trace.reports.step_report import step_report

    path = OWN_TRACES / f"{engine}.pt.trace.json.gz"
    tables = load(path)
    return step_report(tables, step_options(tables, path))


def _top_gaps(report, phase: str, n: int = 2) -> str:
    p = next(x for x in report.phases if x.phase == phase)
    return ", ".join(f"{report.labels[c]} {100 * ns / p.span_ns:.0f}%" for c, ns in p.gaps()[:n])


def build(corpus: Path) -> Note:
    """The note from the corpus's H100 trace and this project's own CPU traces."""
    h100 = _h100(corpus)
    own = {engine: _own(engine) for engine in ENGINES}
    decode = next(p for p in h100.phases if p.phase == "decode")
    note = Note("where-the-tok-s-went", "Where the tok/s went: an engine's trace, step by step, against the wall", {
        "traces": f"`{H100_TRACE}` (corpus, PROVENANCE.md); `traces/where-the-tok-s-went/` (recorded here: "
                  f"`{RECORD}`)",
        "walls": "identity 1 (+3 where the trace gives the context) on the H100 SXM datasheet's 3.35 TB/s at TP 4; "
                 "the CPU's copy-loop bandwidth measured in the recording run (its manifest.json)",
        "kind": "measured (the traces); the walls modelled"})
    note.add("method", "How to read a step",
             "A tok/s figure says how far an engine is from the wall, not why. The trace says why: each forward "
             "pass is a step (vLLM marks it `execute_context_N(T)_generation_M(G)`, older vLLM V1 builds only by "
             "the Python function `execute_model`, iotrace's bench by `iotrace/step …` ranges), its GPU work is "
             "what its host side launched, and every instant of it is charged once: to the weight matrix products "
             "first, then attention, the small ops, copies, communication no compute hides, the device waiting "
             "inside the step (launch overhead) and the host between steps. The rows sum to the step. The weight "
             "GEMMs and attention each have a floor (their bytes at the wall's bandwidth); what a row takes beyond "
             "its floor is a gap, and the largest gap is the tok/s a change can recover. `iotrace report TRACE "
             "--model KEY` prints this for any engine's trace.")
    note.add("h100", "vLLM V1 on four H100s: a 70B model at TP 4",
             f"{len(h100.steps)} steps: {', '.join(f'{n} {k}' for k, n in h100.steps.phases().items())}. Decode "
             f"runs at {decode.pct_of_wall:.0f}% of identity 1 ({decode.tok_s:.4g} of {decode.wall_tok_s:.4g} tok/s "
             "for one stream: a quarter of 141 GB of bf16 weights per GPU at 3.35 TB/s).", _phase_table(h100),
             _waterfall_table(h100, "decode"),
             f"The weight GEMMs run at {decode.gemm_floor_pct:.0f}% of their byte floor: the kernels are near the "
             f"wall. The gap is around them: the device waits {100 * decode.share('idle'):.0f}% of each decode step "
             "between the piecewise CUDA graphs' pieces (vLLM runs attention eagerly between them), and "
             f"{100 * decode.share('communication'):.0f}% is the all-reduce no compute hides. The prefill's wall "
             "needs its token count, which this trace does not state (`iotrace report --steps` and `--batch` "
             "complete what a trace leaves out).")
    rows = []
    for engine, report in own.items():
        d = next(p for p in report.phases if p.phase == "decode")
        rows.append([engine, d.steps, f"{d.median_ms:.4g}", f"{d.tok_s:.3g}",
                     "—" if d.wall_tok_s is None else f"{d.wall_tok_s:.3g}",
                     "above the copy loop's" if d.pct_of_wall is None else f"{d.pct_of_wall:.0f}%",
                     f"{100 * d.share('gemm'):.0f}%", _top_gaps(report, "decode")])
    note.add("cpu", "The pinned model on this machine's engines",
             "SmolLM2-135M at fp32 (the GGUF's Q4_1 weights dequantised: 0.54 GB a token) on the CPU that recorded "
             "the traces, each engine's decode steps against the copy loop's bandwidth:",
             table(["engine", "decode steps", "median ms", "tok/s", "wall tok/s", "% of wall", "weight GEMMs",
                    "largest gaps (beyond floor)"], rows),
             *(f"**{engine}**, decode:\n\n{_waterfall_table(report, 'decode')}" for engine, report in own.items()))
    return note
