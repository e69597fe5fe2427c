"""``iotrace bench --engine NAME[=PYTHON]``: engines side by side on the same tokens (iotrace.engines)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iotrace.errors import InvalidValueError, IotraceError

if TYPE_CHECKING:
    from iotrace.cards import Card

__all__ = ["EngineRunsFailedError", "add_engine_options", "card_for", "check_engine_options", "engine_waterfall",
           "profile_folder", "run_engines"]


class EngineRunsFailedError(IotraceError):
    """Some engines gave no result; the others' are printed (exit 2, one line per failed engine)."""


def card_for(name: str | None) -> Card | None:
    """The card of the walls: ``--card``, else $IOTRACE_CARD or the local GPU; None on a CPU with neither."""
    import torch

    from iotrace.cards import detect

    if name is None and not torch.cuda.is_available():
        import os

        from iotrace.cards import ENV_CARD

        if not os.environ.get(ENV_CARD):
            return None  # a CPU run with no card named: no walls, and the table says why
    return detect(name)


def _engine(text: str):
    from iotrace.engines.launch import parse_engine

    try:
        return parse_engine(text)
    except InvalidValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_engine_options(bench: argparse.ArgumentParser) -> None:
    from iotrace.argtypes import count_at_least

    group = bench.add_argument_group(
        "engines side by side (each in its own interpreter; `make engines` builds the vLLM and llama.cpp venvs)")
    group.add_argument("--engine", type=_engine, action="append", metavar="NAME[=PYTHON]",
                       help="iotrace, transformers, vllm or llama.cpp, repeatable; =PYTHON names the interpreter of "
                            "the venv holding its build (default: this one for iotrace and transformers, "
                            ".engines/NAME/bin/python for vllm and llama.cpp)")
    group.add_argument("--concurrency", type=count_at_least(1), default=1, metavar="N",
                       help="N requests submitted at once (vllm only; default 1)")
    group.add_argument("--threads", type=count_at_least(1), metavar="N",
                       help="CPU threads given to every engine (default: OMP_NUM_THREADS where set, else all cores)")
    group.add_argument("--profile", nargs="?", const="", type=str, metavar="DIR",
                       help="after the timed repetitions, one more recorded with the torch profiler (vLLM: its own) "
                            "into DIR/<engine>.pt.trace.json.gz, with DIR/manifest.json (the model and this run's "
                            "copy-loop bandwidth, for `iotrace report TRACE`) and each engine's decode tok/s with and "
                            "without the profiler; llama.cpp says why it has none (default DIR: "
                            "./iotrace-profile-<timestamp>)")


#: Options of the model bench an engine comparison does not take, with what to do instead.
_NOT_WITH_ENGINES = {"spec": "--spec", "random_weights": "--random-weights", "kv": "--kv", "kernels": "--kernels",
                     "jsonl": "--jsonl", "markdown": "--markdown", "prompt_set": "--prompt-set"}


def check_engine_options(args: argparse.Namespace) -> None:
    """Refuse the model bench's options an engine comparison does not take, one line each."""
    for dest, flag in _NOT_WITH_ENGINES.items():
        if getattr(args, dest, None):
            raise InvalidValueError(f"{flag} with --engine: the engine comparison runs plain greedy decoding of a "
                                    "GGUF", f"drop {flag}, or drop --engine for iotrace's own bench")
    if args.batch != 1 or args.depth != (0,) or args.temperature != 0:
        raise InvalidValueError("--batch, --depth and --temperature with --engine: every engine runs one greedy "
                                "sequence from an empty cache", "drop them (use --concurrency N with vllm)")
    names = [spec.name for spec in args.engine]
    if len(set(names)) != len(names):
        raise InvalidValueError(f"--engine names one engine twice ({', '.join(names)})", "name each engine once")
    if args.concurrency > 1 and set(names) - {"vllm"}:
        others = ", ".join(sorted(set(names) - {"vllm"}))
        raise InvalidValueError(f"--concurrency {args.concurrency} with {others}: only vllm takes concurrent "
                                "requests here (llama-cpp-python's Llama and the reference decoders run one "
                                "sequence)", "drop --concurrency, or run --engine vllm alone")
    _check_interpreters(args.engine)
    if args.dtype is not None and args.dtype != "fp32" and not __import__("torch").cuda.is_available():
        raise InvalidValueError(f"--dtype {args.dtype} on a CPU: the engines' CPU builds compute in fp32 here",
                                "drop --dtype")


def _check_interpreters(specs: list[Any]) -> None:
    """Every engine's interpreter exists and is executable, before the model is converted, the tokenizer loaded or
    any engine started (a missing one was found after the others had run, a minute later)."""
    from iotrace.engines.launch import interpreter_problem
    from iotrace.engines.registry import registry

    engines = registry().engines
    for spec in specs:
        if spec.name in engines and not engines[spec.name].offline:
            continue  # a serve-only engine: run_engine says it has no offline runner, whatever its interpreter
        problem = interpreter_problem(spec)
        if problem is not None:  # its own words, "...: pass --engine NAME=PATH ...", as one line's problem and fix
            said, _, fix = problem.partition(": pass ")
            raise InvalidValueError(f"--engine {spec.label}: {said}", f"pass {fix}" if fix else "")


def _comparison(args: argparse.Namespace, request: Any):
    from iotrace.engines.compare import EngineComparison
    from iotrace.model.gguf_file import pinned_gguf

    profile = profile_folder(args.profile)  # first: a bad folder is refused before the tokenizer loads
    gguf = args.gguf if args.gguf is not None else pinned_gguf()
    ids, source = _prompt(args, request, gguf)
    return EngineComparison(engines=tuple(args.engine), gguf=Path(gguf), prompt_ids=tuple(ids), prompt_source=source,
                            gen_tokens=args.gen_tokens, reps=args.reps, concurrency=args.concurrency,
                            dtype=args.dtype, threads=args.threads, profile=profile)


def profile_folder(given: str | None) -> Path | None:
    """``--profile [DIR]``: the folder, made and checked writable before any engine runs (None without the flag);
    ``./iotrace-profile-<timestamp>`` where no DIR is given (``bench`` writes its result to stdout, so there is no
    result file to put it beside)."""
    if given is None:
        return None
    from iotrace.engines.profiling import default_folder, prepare_folder

    return prepare_folder(Path(given) if given else default_folder())


def engine_waterfall(trace: Path) -> dict[str, Any] | None:
    """Where one engine's profiled steps went (``StepReport.to_dict``: the phases beside their walls, each step's
    waterfall), the model and copy-loop bandwidth read from the run's manifest beside the trace, as `iotrace report
    TRACE` reads them; None where the trace marks no step. An analysis that refuses the trace is ``{"error": line}``:
    the bench's own figures stand."""
    from iotrace.model.step_model import step_options
    from iotrace.trace import load
    from iotrace.trace.reports.step_report import step_report

    try:
        tables = load(trace)
        report = step_report(tables, step_options(tables, trace))
    except IotraceError as exc:
        return {"error": str(exc)}
    return None if report is None else report.to_dict()


def _prompt(args: argparse.Namespace, request: Any, gguf: Path) -> tuple[list[int], str]:
    """The prompt's token ids, as the bench makes them (every engine gets these ids, not text), and where they came
    from. ``request``: the bench's own reading of --model, --prompt, --prompt-file and the default prompt."""
    from iotrace.model.gguf_file import open_gguf
    from iotrace.model.measure import prompt_ids

    if request.prompt_tokens is not None:
        ids = prompt_ids(request, None, open_gguf(gguf).config.vocab)
        return ids, f"{request.prompt_tokens} random token ids (seed {args.seed})"
    from iotrace.model.tokenizer import gguf_tokenizer

    source = (f"--prompt-file {args.prompt_file}" if args.prompt_file is not None
              else "--prompt" if args.prompt is not None else "the bench's shipped default prompt")
    return prompt_ids(request, gguf_tokenizer(gguf), 0), source


def _analyse_profiles(data: dict[str, Any], folder: Path) -> None:
    """Each traced engine's waterfall (:func:`engine_waterfall`) into its row, then the whole comparison beside the
    traces (``bench-engines.json``)."""
    from iotrace.engines.profiling import write_result

    for row in data["engines"]:
        trace = (row.get("profile") or {}).get("trace")
        if trace:
            row["waterfall"] = engine_waterfall(Path(trace))
    write_result(folder, data)


def run_engines(args: argparse.Namespace, bench_request: Any, card: Card | None) -> None:
    """``iotrace bench --engine ...``: the table (or JSON) of every engine that ran; then, if any gave no result,
    one line each on stderr and exit 2. ``bench_request``: the bench's reading of the prompt options."""
    from iotrace.cli.output import emit, progress_lines
    from iotrace.engines.compare import compare_engines
    from iotrace.render.engines import engines_text

    request = _comparison(args, bench_request)
    with progress_lines("bench --engine") as say:  # a line per phase on stderr; stdout stays the result
        data = compare_engines(request, card, say)
        if request.profile is not None:
            _analyse_profiles(data, request.profile)
    emit(args, data, lambda: print(engines_text(data), end=""))
    sys.stdout.flush()
    failed = [row for row in data["engines"] if not row["ok"]]
    if failed:
        raise EngineRunsFailedError("\n".join(f"engine {row['engine']} ({row['python']}): {row['error']}"
                                              for row in failed))
