"""``iotrace bench``: prefill and decode of a real model made of iotrace's kernels; ``iotrace bench import FILE``:
llama-bench, vLLM and SGLang bench results in the same table."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from iotrace.argtypes import count_at_least, layer_counts
from iotrace.cli.bench_engines import add_engine_options, card_for, check_engine_options, run_engines
from iotrace.cli.bench_serve import register_serve
from iotrace.cli.output import add_card, add_json, add_wide, console, emit, usage_with_subcommands
from iotrace.errors import InvalidValueError

__all__ = ["register"]


def _depths(text: str) -> tuple[int, ...]:
    """``0``, ``0,8k``: the depths, each a whole number of tokens >= 0."""
    from iotrace.argtypes import si_number

    out = []
    for part in text.split(","):
        value = si_number(part.strip())
        if value < 0 or value != int(value):
            raise argparse.ArgumentTypeError(f"depth {part!r} is not a whole number of tokens >= 0")
        out.append(int(value))
    return tuple(out)


def _temperature(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"temperature {text!r} is not a number") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"temperature {text!r} must be a finite number >= 0")
    return value


def _gammas(text: str) -> tuple[int, ...]:
    """``4`` or ``1,2,4,8``: draft lengths, each a whole number from 1 to the draft-verify kernel's 32."""
    from iotrace.model.spec_bench import MAX_GAMMA

    out = []
    for part in text.split(","):
        try:
            value = int(part.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"gamma {part.strip()!r} is not a whole number") from None
        if not 1 <= value <= MAX_GAMMA:
            raise argparse.ArgumentTypeError(f"gamma {value} is out of range: draft 1 to {MAX_GAMMA} tokens a step")
        out.append(value)
    return tuple(dict.fromkeys(out))


def register(commands: argparse._SubParsersAction) -> None:
    bench = commands.add_parser(
        "bench", help="prefill and decode tok/s of a real model built from iotrace's kernels, beside the walls",
        description="Decode a model with iotrace's kernel plugins and report prefill, decode at each depth, TTFT, "
                    "inter-token latency, VRAM, power and the exact argv, each beside its wall (identities 1 and 2). "
                    "Default: the pinned SmolLM2-135M on the shipped prompt. `iotrace bench import FILE` reads "
                    "llama-bench, vLLM and SGLang bench files into the same table.")
    which = bench.add_mutually_exclusive_group()
    which.add_argument("--model", metavar="KEY", help="the pinned model: smollm2-135m (the default)")
    which.add_argument("--gguf", type=Path, metavar="PATH", help="any local Llama-architecture GGUF")
    which.add_argument("--random-weights", metavar="MODEL",
                       help="a models.toml shape with random weights (speed only; quality n/a), e.g. llama-3-8b")
    prompt = bench.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", metavar="TEXT", help="the prompt (default: the shipped prompt)")
    prompt.add_argument("--prompt-file", type=Path, metavar="PATH", help="read the prompt from a UTF-8 file")
    prompt.add_argument("--prompt-tokens", type=count_at_least(1), metavar="N",
                        help="N random token ids instead of text (the default for --random-weights: 512)")
    bench.add_argument("--gen-tokens", type=count_at_least(1), default=32, metavar="N",
                       help="decode steps timed per repetition (default 32)")
    bench.add_argument("--batch", type=count_at_least(1), default=1, metavar="N", help="sequences (default 1)")
    bench.add_argument("--depth", type=_depths, default=(0,), metavar="N[,N...]",
                       help="tokens already in the KV cache, like llama-bench -d (default 0), e.g. 0,8k")
    bench.add_argument("--reps", type=count_at_least(1), default=3, metavar="N",
                       help="timed repetitions after one warm-up (default 3); with --spec, alternated plain and "
                            "speculative repetitions (2 or more give a speedup's interval)")
    bench.add_argument("--dtype", choices=("fp16", "bf16", "fp32"),
                       help="weights and activations (default bf16 on a GPU, fp32 on a CPU)")
    bench.add_argument("--kv", choices=("fp16", "bf16", "fp32", "int8"), help="KV cache type (default: --dtype)")
    bench.add_argument("--kernels", choices=("triton", "torch"),
                       help="iotrace's Triton kernels, or their torch references (default triton on a GPU, torch on "
                            "a CPU)")
    add_card(bench, " for the walls (default: $IOTRACE_CARD, then the local GPU; none on a CPU)")
    bench.add_argument("--no-graph", action="store_true", help="launch the decode step eagerly (no CUDA graph)")
    bench.add_argument("--no-power", action="store_true", help="do not read NVML energy")
    bench.add_argument("--seed", type=int, default=0,
                       help="seed of random weights, random prompt tokens and sampling (default 0)")
    bench.add_argument("--temperature", type=_temperature, default=0.0, metavar="T",
                       help="0 (the default): greedy; above 0: sample from softmax(logits / T)")
    spec = bench.add_argument_group("speculative decoding (batch 1; plain decoding is timed in the same run)")
    spec.add_argument("--spec", action="append", metavar="DRAFT",
                      help="ngram (prompt lookup), layerskip:K (the first K layers as the draft) or draft:PATH (a "
                           "second GGUF with the target's vocabulary); repeat or comma-separate for several")
    spec.add_argument("--gamma", type=_gammas, default=(1, 2, 4, 8), metavar="N[,N...]",
                      help="draft tokens per target step, 1 to 32 (default 1,2,4,8)")
    spec.add_argument("--prompt-set", choices=("spec",),
                      help="run every shipped speculation prompt (code, prose, chat: iotrace/data/spec_prompts.toml)")
    out = bench.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the result as JSON")
    out.add_argument("--jsonl", action="store_true", help="one JSON line per depth (prefill figures on each)")
    out.add_argument("--markdown", action="store_true", help="a Markdown table row per depth, for a CardBook recipe")
    add_wide(bench)
    add_engine_options(bench)
    bench.set_defaults(func=_cmd_bench_or_engines)

    sub = bench.add_subparsers(dest="bench_command", metavar="import|serve", parser_class=type(bench))
    imported = sub.add_parser("import", help="read llama-bench (-o json|jsonl|csv|md), vLLM (latency, throughput, "
                                             "serve) and SGLang bench_serving / bench_one_batch results")
    imported.add_argument("file", type=Path, metavar="FILE")
    add_card(imported, " when the file names none (llama-bench's gpu_info is used otherwise)")
    imported.add_argument("--model", metavar="KEY",
                          help="a models.toml shape, for the KV bytes at depth (and the weight bytes of vLLM files)")
    imported.add_argument("--batch", type=count_at_least(1), help="vLLM latency: the --batch-size it ran")
    imported.add_argument("--input-len", type=count_at_least(1), help="vLLM latency: the --input-len it ran")
    imported.add_argument("--output-len", type=count_at_least(1), help="vLLM latency: the --output-len it ran")
    imported.add_argument("--dtype", default="bf16", choices=("fp16", "bf16", "fp8", "fp8e4m3", "int8"),
                          help="the weights' dtype for the walls of vLLM and SGLang files (default bf16)")
    imported.add_argument("--gpus", type=count_at_least(1), default=1, metavar="N",
                          help="tensor parallelism of a serving run (its file does not record it; default 1)")
    imported.add_argument("--ngl", type=layer_counts, default=(), metavar="N[,N…]",
                          help="llama-bench Markdown: the -ngl of each table, in file order, where a table hides it")
    add_wide(imported)
    add_json(imported)
    imported.set_defaults(func=_cmd_import)
    register_serve(sub)
    bench.usage = usage_with_subcommands(
        bench, "import FILE [options]   (llama-bench/vLLM/SGLang results: see `%(prog)s import --help`)",
        "serve --engine NAME [options]   (engines' servers under load: see `%(prog)s serve --help`)")


def _request(args: argparse.Namespace):
    if args.prompt is not None and not args.prompt.strip():  # said before torch, the model and its tokenizer load
        raise InvalidValueError(f"--prompt {args.prompt!r} is empty", "give the prompt text, leave --prompt out for "
                                                                      "the shipped prompt, or pass --prompt-tokens N")
    from iotrace.model.measure import BenchRequest

    if args.model is not None and args.model.lower() not in ("smollm2-135m", "smollm2", "smollm2-135m-instruct"):
        raise InvalidValueError(f"--model {args.model!r} is not the pinned model",
                                "use --model smollm2-135m, --gguf PATH for another GGUF, or --random-weights MODEL")
    text = args.prompt
    if args.prompt_file is not None:
        try:
            text = args.prompt_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidValueError(f"cannot read the prompt file {args.prompt_file} ({exc})",
                                    "pass a readable UTF-8 text file") from None
        if not text.strip():
            raise InvalidValueError(f"the prompt file {args.prompt_file} is empty", "put the prompt text in it")
        if "\x00" in text:  # valid UTF-8 can still be binary: NUL never appears in text
            raise InvalidValueError(f"the prompt file {args.prompt_file} is not text (it holds NUL bytes)",
                                    "pass a UTF-8 text file")
    tokens = args.prompt_tokens
    if args.random_weights is not None:
        from iotrace.model_shapes import model

        model(args.random_weights)  # an unknown shape is refused here, with the known ones
        if text is not None:
            raise InvalidValueError("random weights have no tokenizer: a text prompt means nothing to them",
                                    "pass --prompt-tokens N instead of --prompt")
        tokens = tokens or 512
    if text is None and tokens is None:
        from iotrace.model.prompts import default_prompt

        text = default_prompt()
    return BenchRequest(model="smollm2-135m" if args.gguf is None and args.random_weights is None else None,
                        gguf=args.gguf, random_weights=args.random_weights, prompt=text, prompt_tokens=tokens,
                        gen_tokens=args.gen_tokens, batch=args.batch, depths=args.depth, reps=args.reps,
                        dtype=args.dtype, kv=args.kv, kernels=args.kernels, card=args.card,
                        graph=not args.no_graph, power=not args.no_power, seed=args.seed,
                        temperature=args.temperature)


def _drafts(values: list[str]) -> tuple[str, ...]:
    out = []
    for value in values:
        out.extend([value] if value.startswith("draft:") else [v.strip() for v in value.split(",") if v.strip()])
    return tuple(out)


def _spec_request(args: argparse.Namespace, request):
    from iotrace.model.spec_bench import SpecPrompt, SpecRequest, spec_prompts

    if args.batch != 1:
        raise InvalidValueError(f"--batch {args.batch} with --spec: the speculative loop runs one sequence (each "
                                "sequence accepts a different number of draft tokens a step)", "drop --batch")
    if args.random_weights is not None or args.prompt_tokens is not None:
        raise InvalidValueError("--spec needs real weights and a text prompt: acceptance depends on both",
                                "drop --random-weights / --prompt-tokens")
    if args.depth != (0,) or args.kv is not None:
        raise InvalidValueError("--spec runs at depth 0 in the model's dtype", "drop --depth and --kv")
    if args.prompt_set is not None:
        if args.prompt is not None or args.prompt_file is not None:
            raise InvalidValueError("--prompt-set with --prompt or --prompt-file", "pass one of them")
        prompts = spec_prompts()
    else:
        source = f"--prompt-file {args.prompt_file}" if args.prompt_file is not None else (
            "--prompt" if args.prompt is not None else "the bench's shipped default prompt")
        prompts = (SpecPrompt("prompt", "user", source, request.prompt),)
    drafts = _drafts(args.spec)
    if not drafts:
        raise InvalidValueError("--spec names no draft", "use ngram, layerskip:K or draft:PATH")
    return SpecRequest(drafts=drafts, gammas=args.gamma, prompts=prompts, gen_tokens=args.gen_tokens,
                       gguf=args.gguf, dtype=args.dtype, kernels=args.kernels, temperature=args.temperature,
                       seed=args.seed, reps=args.reps)


def _cmd_spec(args: argparse.Namespace, request) -> None:
    from iotrace.model.spec_bench import run_spec_bench
    from iotrace.render.speculation import speculation_text

    if args.jsonl or args.markdown:
        raise InvalidValueError("--spec prints a table or --json", "drop --jsonl / --markdown")
    spec = _spec_request(args, request)
    card = card_for(args.card)
    with console().status("bench --spec") as status:
        data = run_spec_bench(spec, card, progress=lambda text: status.update(f"bench --spec: {text}"))
    emit(args, data, lambda: print(speculation_text(data), end=""))


def _cmd_bench(args: argparse.Namespace) -> None:
    request = _request(args)  # first: a bad request is one line before torch is imported
    from iotrace.cli.output import progress_lines
    from iotrace.model.measure import run_bench
    from iotrace.render.bench import bench_markdown, print_bench

    if args.spec:
        _cmd_spec(args, request)
        return
    card = card_for(args.card)
    # A line on stderr per phase (loading, copy bandwidth, warm-up, each repetition), in a pipe too: stdout stays the
    # whole table or JSON.
    with progress_lines("bench") as say:
        result = run_bench(request, card, progress=say)
    data = result.to_dict()
    if args.jsonl:
        for line in _jsonl(data):
            print(json.dumps(line))
        return
    if args.markdown:
        print(bench_markdown(data))
        return
    emit(args, data, lambda: print_bench(console(args.wide), data))


def _cmd_bench_or_engines(args: argparse.Namespace) -> None:
    if args.profile is not None and not args.engine:
        raise InvalidValueError("--profile records the engines' traces: it needs --engine",
                                "add --engine iotrace (iotrace's own decoder) or the engines to trace")
    if args.engine:
        check_engine_options(args)  # before the bench's own checks, so a refusal names --engine
        run_engines(args, _request(args), card_for(args.card))
    else:
        _cmd_bench(args)


def _jsonl(data: dict) -> list[dict]:
    """One line per depth: the decode figures with the run's prefill, model, card and argv on each."""
    common = {k: data[k] for k in ("model", "device", "kernels", "dtype", "card", "batch")}
    return [{**common, "prompt_tokens": data["prompt"]["tokens"], "prefill": data["prefill"], **depth,
             "argv": data["manifest"]["argv"]} for depth in data["decode"]]


def _cmd_import(args: argparse.Namespace) -> None:
    from iotrace.model.imported import imported_table, load_bench_file
    from iotrace.render.bench import print_imported

    runs = load_bench_file(args.file, card=args.card, model=args.model, batch=args.batch, input_len=args.input_len,
                           output_len=args.output_len, dtype=args.dtype, gpus=args.gpus, ngl=args.ngl)
    table = imported_table(runs)
    if args.json:
        from dataclasses import asdict

        print(json.dumps([asdict(r) for r in runs], default=str, indent=2))
        return
    print_imported(console(args.wide), table)
    sys.stdout.flush()
