"""``iotrace bench serve``: engines' own OpenAI-compatible servers through a load sweep
(:mod:`iotrace.engines.serve_sweep`)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from iotrace import interrupts
from iotrace.errors import InvalidValueError, IotraceError

__all__ = ["register_serve"]

#: What -o writes: the Pareto chart (HTML, PNG, SVG), the result (JSON) or the tables (Markdown, text).
_WRITES = ("html", "png", "svg", "json", "md", "term")


class ServeFailedError(IotraceError):
    """Some curve or point gave no figures; what ran is printed first (exit 2, one line each)."""


class ServeInterruptedError(IotraceError):
    """Ctrl-C: the finished points were printed and written, the servers stopped (exit 130, as a shell reports
    SIGINT)."""

    exit_code = 130


def _typed(parse):
    """An argparse type from one of serve_load's parsers: its InvalidValueError is argparse's one-line usage error."""
    def convert(text: str):
        try:
            return parse(text)
        except InvalidValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    convert.__name__ = parse.__name__
    return convert


def _load(name: str):
    def parse(text: str):
        from iotrace.engines import serve_load

        return getattr(serve_load, name)(text)
    parse.__name__ = name
    return _typed(parse)


def _engines(text: str):
    from iotrace.engines.launch import parse_engine

    specs = [parse_engine(part) for part in text.split(",") if part.strip()]
    if not specs:
        raise InvalidValueError(f"--engine {text!r} names no engine", "e.g. --engine llama.cpp,vllm")
    return specs


def _server_args(text: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--server-args {text!r} does not split as a shell line ({exc})") from None


def register_serve(sub: argparse._SubParsersAction) -> None:
    from iotrace.argtypes import count_at_least, positive_number
    from iotrace.cli.output import add_card, add_json, add_output

    serve = sub.add_parser(
        "serve", help="drive engines' own OpenAI-compatible servers through a load sweep, beside the batched wall",
        description="Start each engine's server from its pinned venv on a free loopback port (or use --url), run "
                    "closed-loop concurrency and/or open-loop rate points through a streaming client, and report "
                    "TTFT, TPOT, ITL and end-to-end latency (mean, median, p90, p99), request and token throughput, "
                    "goodput under --slo, each point beside the batched decode wall (identities 1 and 3). The "
                    "servers are stopped afterwards, on an error and on Ctrl-C.")
    serve.add_argument("--engine", type=_typed(_engines), action="extend", metavar="NAME[=PYTHON][,…]",
                       help="engines whose servers to start (vllm, llama.cpp, or an engine plugin's); repeatable; "
                            "with --url, the one engine serving there (for its walls and request defaults)")
    serve.add_argument("--url", metavar="URL", help="a server already running (OpenAI-compatible); nothing started")
    serve.add_argument("--gguf", type=Path, metavar="PATH", help="the model (default: the pinned SmolLM2-135M GGUF)")
    serve.add_argument("--concurrency", type=_load("parse_concurrency"), metavar="N[,N…]",
                       help="closed-loop points: N streams back to back (default 1,2,4 unless --rate is given)")
    serve.add_argument("--rate", type=_load("parse_rates"), metavar="R[,R…]",
                       help="open-loop points: requests per second (gamma arrivals; inf: all at once)")
    serve.add_argument("--burstiness", type=_load("parse_burstiness"), default=1.0, metavar="X",
                       help="the arrivals' gamma shape: 1 is Poisson (the default), below 1 burstier")
    serve.add_argument("--requests", type=count_at_least(1), metavar="N",
                       help="measured requests per point (default: 5 per stream, at least 10)")
    serve.add_argument("--warmup", type=count_at_least(0), metavar="N",
                       help="warm-up requests per point, left out of the figures (default: one per stream)")
    serve.add_argument("--input-tokens", type=count_at_least(1), default=32, metavar="N",
                       help="prompt tokens per request: windows of the shipped text (default 32)")
    serve.add_argument("--output-tokens", type=count_at_least(1), default=16, metavar="N",
                       help="tokens generated per request, EOS ignored (default 16)")
    serve.add_argument("--slo", type=_load("parse_slo"), metavar="ttft=MS,tpot=MS",
                       help="latency targets for goodput (keys ttft, tpot, itl, e2el), e.g. ttft=2000,tpot=100")
    serve.add_argument("--server-args", type=_server_args, action="append", metavar="'FLAGS'",
                       help="flags appended to each engine's server command; repeat for one curve per flag set")
    serve.add_argument("--reps", type=count_at_least(1), default=1, metavar="N",
                       help="repetitions of every point (2 or more give each flag's effect a 95%% interval)")
    serve.add_argument("--seed", type=int, default=0, help="seed of the prompts' offset and the arrivals (default 0)")
    serve.add_argument("--timeout", type=positive_number, default=300.0, metavar="S",
                       help="a request's hang guard in seconds (default 300)")
    serve.add_argument("--start-timeout", type=positive_number, default=900.0, metavar="S",
                       help="how long a server may take to get ready (default 900)")
    serve.add_argument("--context", type=count_at_least(16), default=512, metavar="N",
                       help="the context the servers are sized for (default 512)")
    serve.add_argument("--log-dir", type=Path, metavar="DIR", help="where the servers' logs go (default: a temp dir)")
    add_card(serve, " for the walls of a GPU or --url server (a local CPU's are measured)")
    add_output(serve, _WRITES, "the Pareto chart (.html/.png/.svg), the result (.json) or the tables (.md/.txt)")
    add_json(serve)
    serve.set_defaults(func=_cmd_serve)


def _sweep(args: argparse.Namespace):
    from iotrace.engines.serve_sweep import ServePoint, ServeSweep
    from iotrace.model.gguf_file import pinned_gguf

    if not args.engine and not args.url:
        raise InvalidValueError("bench serve needs --engine NAME (a server to start) or --url URL (one running)",
                                "e.g. iotrace bench serve --engine llama.cpp")
    names = [spec.name for spec in args.engine or []]
    if args.url and len(names) > 1:
        raise InvalidValueError(f"--url with {len(names)} engines ({', '.join(names)}): one server answers there",
                                "name the one engine serving at --url, or drop --url to start each")
    if args.url and args.server_args:
        raise InvalidValueError("--server-args with --url: iotrace starts no server there, so it passes no flags",
                                "restart that server with the flags, or drop --url to let iotrace start it")
    if len(set(names)) != len(names):
        raise InvalidValueError(f"--engine names one engine twice ({', '.join(names)})", "name each engine once")
    if args.engine:
        from iotrace.engines.registry import engine

        for spec in args.engine:
            found = engine(spec.name)
            if not found.serves:
                raise InvalidValueError(found.why_no_server(), "bench serve drives servers: use vllm or llama.cpp "
                                        "(or --engine with plain `iotrace bench` for offline runs)")
    if args.input_tokens + args.output_tokens > args.context:
        raise InvalidValueError(f"--input-tokens {args.input_tokens} + --output-tokens {args.output_tokens} exceed "
                                f"--context {args.context}", "raise --context or shorten the requests")
    if args.url:
        from iotrace.engines.server import RemoteServer

        RemoteServer(args.url).check()  # an unreachable --url is one line before anything runs
    points = [ServePoint(concurrency=c) for c in args.concurrency or ()]
    points += [ServePoint(rate=r) for r in args.rate or ()]
    if not points:
        points = [ServePoint(concurrency=c) for c in (1, 2, 4)]
    gguf = args.gguf if args.gguf is not None else pinned_gguf()
    if not Path(gguf).is_file():
        raise InvalidValueError(f"--gguf {gguf} is not a file", "name a GGUF file")
    return ServeSweep(gguf=Path(gguf), points=tuple(points), engines=tuple(args.engine or ()), url=args.url,
                      server_args=tuple(args.server_args or [()]), input_tokens=args.input_tokens,
                      output_tokens=args.output_tokens, requests=args.requests, warmup=args.warmup,
                      burstiness=args.burstiness, seed=args.seed, slo=args.slo, reps=args.reps,
                      timeout_s=args.timeout, start_timeout_s=args.start_timeout, context=args.context,
                      log_dir=args.log_dir)


def _failures(data: dict[str, Any]) -> list[str]:
    lines = []
    for curve in data["curves"]:
        if curve.get("error"):
            lines.append(f"{curve['label']}: {curve['error']}")
        for p in curve["points"]:
            where = f"{curve['label']} {p['label']} (rep {p['rep'] + 1})"
            if p.get("error"):
                lines.append(f"{where}: {p['error']}")
            elif not p.get("completed") and not p.get("interrupted"):
                reasons = sorted({e for e in p.get("errors") or [] if e})
                lines.append(f"{where}: no request completed ({'; '.join(reasons)[:200] or 'none sent'})")
    return lines


def _cmd_serve(args: argparse.Namespace) -> None:
    from iotrace.cli.bench_engines import card_for
    from iotrace.cli.output import answer_format, emit, progress_lines, write_answer
    from iotrace.engines.serve_sweep import run_sweep
    from iotrace.render.serve import pareto_figure, serve_text

    fmt = answer_format("bench serve", args.output, _WRITES)  # a bad -o is refused before any server starts
    sweep = _sweep(args)
    card = card_for(args.card)
    data: dict[str, Any] = {}
    with progress_lines("bench serve") as say:
        run_sweep(sweep, card, say, into=data)
    emit(args, data, lambda: print(serve_text(data), end=""))
    if fmt is not None:
        write_answer(args.output, fmt, figure=lambda: pareto_figure(data), data=lambda: data,
                     draw=lambda c: c.print(serve_text(data), end="", markup=False, highlight=False),
                     markdown=lambda: "```\n" + serve_text(data) + "```\n")
        print(f"wrote {args.output}", file=sys.stderr if args.json else sys.stdout)
    sys.stdout.flush()
    if data.get("interrupted"):
        raise ServeInterruptedError(f"interrupted ({interrupts.cause()}): the finished points are above; every server "
                                    "was stopped",
                                    "rerun for the rest")
    failed = _failures(data)
    if failed:
        raise ServeFailedError("\n".join(failed))
