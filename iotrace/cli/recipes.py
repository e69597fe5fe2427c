"""``iotrace recipes``: the named-card atlas of measured runs, each beside its wall; ``recipes add FILE…`` files bench
results as recipes; ``recipes predict`` gives a model and quant's wall on every card, and a predicted rate."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from iotrace.argtypes import count_at_least, layer_counts
from iotrace.cli.output import (
    add_json,
    add_output,
    add_wide,
    answer_format,
    console,
    finite_json,
    usage_with_subcommands,
    write_answer,
)

__all__ = ["register"]

_WRITES = ("term", "md", "html", "json", "png", "svg")


def _add_dirs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", type=Path, action="append", metavar="DIR",
                        help="a recipes folder (repeatable); default: the project's published set")


def _add_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--card", metavar="NAME", help="only this card (any CardBook spelling) or machine (e.g. CPU)")
    parser.add_argument("--model", metavar="TEXT", help="only models whose name contains TEXT (e.g. 'llama 8B')")
    parser.add_argument("--quant", metavar="TEXT", help="only quants containing TEXT (e.g. Q4_K, fp8)")
    parser.add_argument("--engine", metavar="TEXT", help="only engines containing TEXT (llama.cpp, vllm, sglang, "
                                                         "iotrace)")


def register(commands: argparse._SubParsersAction) -> None:
    recipes = commands.add_parser(
        "recipes", help="the named-card atlas: measured model/quant/engine runs on each card, beside the wall",
        description="Every recipe (a measured run of a model, quant and engine on a card, with its source) grouped "
                    "by card, then model, quant and engine: decode tok/s and the fraction of the decode wall "
                    "(identity 1) it reaches, prefill tok/s, context and load. A table, not a ranking. "
                    "`recipes add FILE…` files llama-bench, vLLM, SGLang and iotrace bench results as recipes; "
                    "`recipes predict` gives a model and quant's wall on every card.")
    _add_dirs(recipes)
    _add_filters(recipes)
    out = recipes.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the recipes as JSON (iotrace.recipe/1 records)")
    out.add_argument("--markdown", action="store_true", help="print a Markdown section per card")
    add_output(recipes, _WRITES, "the atlas (.html or .png/.svg: a plot per card of decode tok/s against the wall)")
    add_wide(recipes)
    recipes.set_defaults(func=_cmd_list)

    sub = recipes.add_subparsers(dest="recipes_command", metavar="add|predict", parser_class=type(recipes))
    add = sub.add_parser("add", help="file bench results as recipes (llama-bench json/jsonl/csv/md or a notebook "
                                     "printing its tables, vLLM latency/throughput/serve, SGLang "
                                     "bench_serving/bench_one_batch, iotrace bench --json)")
    add.add_argument("files", type=Path, nargs="+", metavar="FILE")
    add.add_argument("--dir", type=Path, metavar="DIR", help="the recipes folder (default: the published set)")
    add.add_argument("--card", metavar="NAME", help="the card, when the file names none (serving results never do)")
    add.add_argument("--model", metavar="KEY", help="a models.toml shape: the KV bytes at depth, and a serving "
                                                    "file's weight bytes")
    add.add_argument("--gpus", type=count_at_least(1), default=1, metavar="N",
                     help="tensor parallelism of a serving run (its file does not record it; default 1)")
    add.add_argument("--dtype", default="bf16", choices=("fp16", "bf16", "fp8", "fp8e4m3", "int8"),
                     help="the weights' width in a vLLM/SGLang run (default bf16)")
    add.add_argument("--ngl", type=layer_counts, default=(), metavar="N[,N…]",
                     help="llama-bench Markdown: the -ngl of each table, in file order, where a table hides it")
    add.add_argument("--batch", type=count_at_least(1), help="vLLM latency: the --batch-size it ran")
    add.add_argument("--input-len", type=count_at_least(1), help="vLLM latency: the --input-len it ran")
    add.add_argument("--output-len", type=count_at_least(1), help="vLLM latency: the --output-len it ran")
    add.add_argument("--url", metavar="URL", help="where the file is published (makes its recipes 'published')")
    add.add_argument("--commit", metavar="SHA", help="the commit the URL's file is read at")
    add.add_argument("--date", metavar="DATE", help="when the source was measured or published")
    add.add_argument("--license", metavar="TEXT", help="the source's licence")
    add.add_argument("--why", metavar="TEXT", help="why the stated options hold (e.g. 'TP=8 per the README')")
    add_json(add)
    add.set_defaults(func=_cmd_add)

    predict = sub.add_parser("predict", help="a model and quant's decode wall on every card, measured or predicted")
    predict.add_argument("--model", required=True, metavar="TEXT", help="a model the recipes hold (e.g. 'llama 8B')")
    predict.add_argument("--quant", required=True, metavar="TEXT", help="its quant (e.g. 'Q4_K - Medium')")
    predict.add_argument("--engine", default="llama.cpp", metavar="NAME",
                         help="whose measured fractions of the wall predict (default llama.cpp)")
    _add_dirs(predict)
    pout = predict.add_mutually_exclusive_group()
    pout.add_argument("--json", action="store_true", help="print the rows as JSON")
    pout.add_argument("--markdown", action="store_true", help="print a Markdown table")
    add_wide(predict)
    predict.set_defaults(func=_cmd_predict)
    recipes.usage = usage_with_subcommands(recipes, "add FILE… [options]   (see `%(prog)s add --help`)",
                                           "predict --model TEXT --quant TEXT [options]")


def _recipes(dirs: list[Path] | None):
    from iotrace.recipes.store import PUBLISHED, read_folder

    return [r for folder in (dirs or [PUBLISHED]) for r in read_folder(folder)]


def _cmd_list(args: argparse.Namespace) -> None:
    from iotrace.recipes.atlas import atlas_table, select
    from iotrace.render.recipes import atlas_figure, atlas_markdown, print_atlas

    chosen = select(_recipes(args.dir), card=args.card, model=args.model, quant=args.quant, engine=args.engine)
    table = atlas_table(chosen)
    data = {"schema": "iotrace.recipes/1", "recipes": [r.to_dict() for r in chosen]}
    fmt = answer_format("recipes", args.output, _WRITES)
    if fmt is not None:
        write_answer(args.output, fmt, figure=lambda: atlas_figure(table), data=lambda: data,
                     markdown=lambda: atlas_markdown(table), draw=lambda c: print_atlas(c, table))
        print(f"{len(chosen)} recipes; wrote {args.output}")
        return
    if args.json:
        print(json.dumps(finite_json(data), indent=2))
    elif args.markdown:
        print(atlas_markdown(table), end="")
    else:
        print_atlas(console(args.wide), table)


def _cmd_add(args: argparse.Namespace) -> None:
    from iotrace.recipes.store import PUBLISHED, ImportOptions, add

    options = ImportOptions(card=args.card, model=args.model, gpus=args.gpus, dtype=args.dtype, ngl=args.ngl,
                            batch=args.batch, input_len=args.input_len, output_len=args.output_len, url=args.url,
                            commit=args.commit, date=args.date, license=args.license, why=args.why)
    done = add(args.files, args.dir or PUBLISHED, options)
    if args.json:
        print(json.dumps(finite_json([{"source": str(a.source), "written": str(a.written), "replaced": a.replaced,
                                       "recipes": len(a.recipes)} for a in done]), indent=2))
        return
    show = console()
    for a in done:
        show.print(f"{a.source}: {len(a.recipes)} recipe{'s' if len(a.recipes) != 1 else ''} → {a.written}"
                   + (" (replaced)" if a.replaced else ""))
        missing = sorted({r.machine for r in a.recipes if r.card is None and r.placement != "cpu"})
        if missing:
            # Kept, with what is missing said once: no CardBook card, so no wall.
            show.print(f"  no CardBook card for {', '.join(missing)}: those recipes are kept without walls "
                       "(add the card to iotrace/data/cards.toml, or pass --card)")


def _cmd_predict(args: argparse.Namespace) -> None:
    from iotrace.recipes.predict import predict
    from iotrace.render.recipes import predictions_markdown, print_predictions

    data = predict(_recipes(args.dir), args.model, args.quant, args.engine).to_dict()
    if args.json:
        print(json.dumps(finite_json(data), indent=2))
    elif args.markdown:
        print(predictions_markdown(data), end="")
    else:
        print_predictions(console(args.wide), data, f"{args.model} {args.quant} ({args.engine}) on every card")
