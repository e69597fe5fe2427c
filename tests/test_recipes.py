"""``iotrace.recipes`` and ``iotrace recipes``: the published set, its walls recomputed by hand, its rows checked
against the corpus files they came from, and filing new sources.

The walls are recomputed here from the CardBook's figures (``Card.bandwidth_bytes_per_s``, ``peak_flop_per_s``)
and the recipe's own weight bytes and parameter count, not with iotrace's wall helpers; the corpus rows are read
with plain str/json parsing.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from iotrace.cards import card_book, lookup
from iotrace.errors import InvalidValueError
from iotrace.recipes.atlas import atlas_table, select
from iotrace.recipes.predict import Prediction, predict
from iotrace.recipes.store import PUBLISHED, ImportOptions, add, read_file, read_folder, recipes_of

from .conftest import cli_in_process, run_cli

RECIPES = read_folder(PUBLISHED)
BENCH = "bench-outputs"
SGLANG = "4xh200_sglang_bench_serving_llama3.3-70b_offline.jsonl"
DASH = "\N{EN DASH}"  # between an interval's ends


def _figures(recipe):
    return [f for f in (recipe.prefill, recipe.decode, recipe.end_to_end) if f is not None]


# --- the published set ----------------------------------------------------------------------------------------------


def test_the_published_set_covers_at_least_six_named_cards_each_cited_at_a_commit() -> None:
    cards = {r.card for r in RECIPES if r.card and r.placement == "gpu"}
    assert len(cards) >= 6 and {"rtx4090", "a100-sxm4-80gb", "h100-pcie", "l40s", "mi300x", "h200-sxm"} <= cards
    for r in RECIPES:
        assert r.source.kind == "published" and re.fullmatch(r"[0-9a-f]{40}", r.source.commit or ""), r.source
        assert r.source.url.startswith("https://github.com/") and f"/blob/{r.source.commit}/" in r.source.url
        assert r.source.license and all(f.location for f in _figures(r))


def _prefill_peak(card, quant: str) -> float:
    """The peak llama.cpp's prefill of these weights runs at: llama-bench's ftype names the arithmetic."""
    words = set(re.split(r"[\s\-]+", quant.upper()))
    names = (("bf16_tensor",) if "BF16" in words else ("fp16_tensor",) if "F16" in words else
             ("tf32_tensor", "fp32") if "F32" in words else ("int8_tensor", "fp16_tensor", "fp32"))
    return card.peak_flop_per_s(next(n for n in names if n in card.peak_tflops))


def test_every_published_wall_and_fraction_recomputed_by_hand() -> None:
    checked = 0
    for r in RECIPES:
        d = r.derived
        if d.decode_wall_tok_s is not None:
            wall = r.gpus * lookup(r.card).bandwidth_bytes_per_s / r.weight_bytes  # identity 1, weights only
            assert d.decode_wall_tok_s == pytest.approx(wall, rel=1e-9)
            assert d.decode_fraction == pytest.approx(r.decode.tok_s / wall, rel=1e-9)
            checked += 1
        if d.prefill_wall_tok_s is not None:
            card = lookup(r.card)
            n_prompt = int(re.match(r"pp ?(\d+)", r.prefill.test).group(1))
            tokens = min(r.flags.get("n_ubatch", 512), n_prompt)  # llama-bench's default -ub 512
            compute = r.gpus * _prefill_peak(card, r.quant) / (2 * r.params)  # identity 2
            bandwidth = tokens * r.gpus * card.bandwidth_bytes_per_s / r.weight_bytes  # identity 1 per micro-batch
            assert d.prefill_wall_tok_s == pytest.approx(min(compute, bandwidth), rel=1e-9), r.prefill
            if d.prefill_fraction is None:  # measured above the wall: the peak does not describe the run, said
                assert r.prefill.tok_s > d.prefill_wall_tok_s and "above the computed wall" in d.note
            else:
                assert d.prefill_fraction == pytest.approx(r.prefill.tok_s / d.prefill_wall_tok_s, rel=1e-9)
            checked += 1
    assert checked >= 150


def test_no_published_fraction_is_above_its_wall_and_no_wall_where_there_is_none() -> None:
    """A contradiction sweep: a share above 1, a wall on a CPU or partial row, or a mixture of experts with a wall."""
    for r in RECIPES:
        d = r.derived
        for fraction in (d.decode_fraction, d.prefill_fraction):
            assert fraction is None or 0 < fraction <= 1, r
        if r.placement != "gpu" or "moe" in r.model or r.model.startswith("gpt-oss"):
            assert d.decode_wall_tok_s is d.prefill_wall_tok_s is None and d.note, r


def test_every_quoted_row_gives_its_figure() -> None:
    """Each figure quotes the row it came from; the row's own rate is the figure (a Markdown t/s cell, a JSON avg_ts
    or serving latency)."""
    quoted = 0
    for r in RECIPES:
        for f in _figures(r):
            if f.row is None:
                continue
            quoted += 1
            if f.row.startswith("|"):
                rate = [c.strip() for c in f.row.strip("|").split("|")][-1]
                assert f.tok_s == float(rate.split("±")[0]) and f.spread == float(rate.split("±")[1])
            else:
                row = json.loads(f.row)
                want = (row["avg_ts"] if "avg_ts" in row else row["tokens_per_second"] if "tokens_per_second" in row
                        else 1000 / (row.get("median_tpot_ms") or row["median_itl_ms"]))
                assert f.tok_s == pytest.approx(want, rel=1e-12)
    assert quoted >= 190


def _corpus_line(corpus: Path, file: str, location: str) -> str:
    number = int(location.removeprefix("line "))
    return (corpus / BENCH / file).read_text(encoding="utf-8").splitlines()[number - 1]


def test_the_corpus_recipes_are_the_corpus_files_rows(corpus: Path) -> None:
    names = {p.name for p in (corpus / BENCH).iterdir()}
    from_corpus = [r for r in RECIPES if r.source.file in names]
    assert {r.source.file for r in from_corpus} == names
    for r in from_corpus:
        for f in _figures(r):
            if f.location.startswith("line "):
                line = _corpus_line(corpus, r.source.file, f.location)
                if line.startswith("|"):
                    cells = [c.strip() for c in line.strip().strip("|").split("|")]
                    assert f.tok_s == float(cells[-1].split("±")[0]) and f.test == cells[-2]
                elif r.engine == "sglang":
                    row = json.loads(line)
                    assert f.tok_s == pytest.approx(1000 / row["median_itl_ms"]) and r.output_tok_s == row[
                        "output_throughput"]
                else:
                    assert f.tok_s == json.loads(line)["avg_ts"]
            else:  # the one object of a vLLM file
                data = json.loads((corpus / BENCH / r.source.file).read_text(encoding="utf-8"))
                want = 1000 / data["median_tpot_ms"] if "median_tpot_ms" in data else data["tokens_per_second"]
                assert f.tok_s == pytest.approx(want, rel=1e-12)


def test_the_mixed_markdowns_cpu_rows_are_filed_under_the_cpu() -> None:
    l40s = [r for r in RECIPES if r.source.file.startswith("l40s_")]
    by_place = {r.placement: r for r in l40s}
    assert set(by_place) == {"cpu", "partial", "gpu"}
    assert (by_place["cpu"].card, by_place["cpu"].machine, by_place["cpu"].decode.tok_s) == (None, "CPU", 15.84)
    assert (by_place["partial"].card, by_place["partial"].derived.decode_wall_tok_s) == ("l40s", None)
    assert (by_place["gpu"].card, by_place["gpu"].decode.tok_s, by_place["gpu"].prefill.tok_s) == \
        ("l40s", 104.61, 7698.65)


# --- the atlas and the prediction -------------------------------------------------------------------------------------


def test_the_atlas_groups_by_card_in_cardbook_order_and_filters() -> None:
    table = atlas_table(RECIPES)
    assert len(table) == len(RECIPES)
    order = [c.key for c in __import__("iotrace.cards", fromlist=["card_book"]).card_book().cards]
    seen = [c for c in dict.fromkeys(table["card"]) if c in order]
    assert seen == sorted(seen, key=order.index)
    l40s = select(RECIPES, card="L40S")
    assert {r.card for r in l40s} == {"l40s"} and len(select(RECIPES, card="cpu")) == 1
    assert {r.engine for r in select(RECIPES, engine="sglang")} == {"sglang"}


def _predicted(recipes=RECIPES, model: str = "llama 8B", quant: str = "Q4_K - Medium") -> dict[str, Prediction]:
    return {r.card: r for r in predict(recipes, model, quant, "llama.cpp").rows}


def test_predict_keeps_measured_rates_and_every_wall() -> None:
    by_card = _predicted()
    weights = statistics.median(r.weight_bytes for r in select(RECIPES, model="llama 8B", quant="Q4_K - Medium"))
    assert weights == round(4.58 * 2 ** 30)  # llama-bench's "4.58 GiB"
    assert by_card["rtx4090"].kind == "measured" and by_card["rtx4090"].tok_s == 130.58  # tg512, the sweep's first
    assert by_card["h100-pcie"].kind == "measured" and by_card["h100-pcie"].tok_s == 145.55
    assert by_card["gtx1650"].kind == "does not fit"  # 4 GiB (4.29 GB) of memory, 4.92 GB of weights
    for r in by_card.values():
        assert r.wall_tok_s == pytest.approx(lookup(r.card).bandwidth_bytes_per_s / weights, rel=1e-12)


def test_a_card_with_measured_kin_is_predicted_inside_their_spread() -> None:
    """Issue 46: the H800 PCIe (the H100 PCIe's bus, 2 TB/s) was predicted at 253.9 tok/s from one median of mostly
    consumer cards, beside the H100 PCIe's measured 145.6. Its basis is now the datacenter NVIDIA cards that ran these
    weights, its rate the fraction of the nearest in bandwidth (the H100 PCIe itself), inside their spread."""
    by_card = _predicted()
    h800 = by_card["h800-pcie"]
    runs = select(RECIPES, model="llama 8B", quant="Q4_K - Medium", engine="llama.cpp")
    a100, h100 = (r.derived.decode_fraction for r in runs if r.card in ("a100-sxm4-80gb", "h100-pcie")
                  and r.depth == 0 and r.decode and r.decode.test == "tg512")
    assert (h800.kind, h800.scope, h800.n) == ("predicted", "datacenter nvidia cards", 2)
    assert {row.card for row in h800.basis_rows} == {"a100-sxm4-80gb", "h100-pcie"}
    assert h800.tok_s == pytest.approx(h100 * h800.wall_tok_s) == pytest.approx(145.55)  # the twin's own rate
    assert (h800.low_tok_s, h800.high_tok_s) == (pytest.approx(a100 * h800.wall_tok_s), pytest.approx(h800.tok_s))
    for key in ("h100-sxm", "h200-sxm", "b200"):  # faster buses: the A100 SXM (2.04 TB/s) is nearest
        row = by_card[key]
        assert row.tok_s == pytest.approx(a100 * row.wall_tok_s) and row.tok_s < 0.4 * row.wall_tok_s, row


def test_every_prediction_rests_on_its_own_card_or_its_kin_and_lies_in_their_spread() -> None:
    """The rule for every card, not one: the basis is the card's own runs, else cards of its segment and vendor (the
    same model and quant where they ran it); the rate lies in the basis's spread; no kin, no number."""
    for model, quant in (("llama 8B", "Q4_K - Medium"), ("llama 8B", "F16"), ("llama 70B", "Q4_K")):
        for key, r in _predicted(model=model, quant=quant).items():
            card = lookup(key)
            if r.kind != "predicted":
                assert r.tok_s is None or r.kind == "measured", r
                continue
            rows = r.basis_rows
            assert r.n == len(rows) >= 1 and f"n={r.n}" in r.basis
            assert all(row.card in r.basis for row in rows)
            if r.scope == "this card":
                assert {row.card for row in rows} == {key}
            else:
                assert all((lookup(row.card).segment, lookup(row.card).vendor) == (card.segment, card.vendor)
                           for row in rows), r
            fractions = [row.fraction for row in rows]
            assert r.low_tok_s == pytest.approx(min(fractions) * r.wall_tok_s)
            assert r.high_tok_s == pytest.approx(max(fractions) * r.wall_tok_s)
            assert r.low_tok_s <= r.tok_s <= r.high_tok_s


def test_a_card_with_no_measured_kin_has_no_basis_and_its_own_runs_come_first() -> None:
    by_card = _predicted()
    for key in ("mi300x", "mi355x", "gb10", "w7900"):  # no AMD datacenter card, no workstation ran llama.cpp
        assert (by_card[key].kind, by_card[key].tok_s, by_card[key].n) == ("no basis", None, 0)
        assert by_card[key].basis.startswith("no basis: llama.cpp measured no ")
    l40s = by_card["l40s"]  # its own qwen3 8B run, before the HBM datacenter cards' 33-36%
    assert (l40s.scope, [(row.card, row.model) for row in l40s.basis_rows]) == ("this card", [("l40s", "qwen3 8B")])
    # A run of the H100 SXM (another model) put in the set: the H100 SXM is then predicted from it alone.
    h100_sxm = [replace(r, card="h100-sxm", derived=replace(r.derived, decode_fraction=0.5)) for r in RECIPES
                if r.card == "a100-sxm4-80gb" and r.model == "llama 70B"]
    row = _predicted(RECIPES + h100_sxm)["h100-sxm"]
    assert (row.scope, row.n, row.tok_s) == ("this card", 1, pytest.approx(0.5 * row.wall_tok_s))


def test_a_mixture_of_experts_has_no_wall_to_predict_on() -> None:
    with pytest.raises(InvalidValueError, match="no wall for 'gpt-oss' in 'F16': gpt-oss 20B is a mixture of experts"):
        predict(RECIPES, "gpt-oss", "F16", "llama.cpp")


def test_predict_into_a_pipe_is_whole_and_its_json_names_each_basis() -> None:
    """A real pipe: every card's row whole (no cut cell), the basis of each prediction and the method under it."""
    done = run_cli("recipes", "predict", "--model", "llama 8B", "--quant", "Q4_K - Medium")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    lines = done.stdout.splitlines()
    assert "…" not in done.stdout and max(len(line) for line in lines) <= 300
    rows = {line.split("│")[1].strip(): line for line in lines if line.startswith("│") and line.split("│")[1].strip()}
    assert set(rows) == {c.key for c in card_book().cards if c.memory_bandwidth_gbs is not None}
    h800 = rows["h800-pcie"]
    assert "predicted" in h800 and "145.6" in h800 and f"132.5{DASH}145.6" in h800
    assert "no basis" in rows["mi300x"] and "predicted = each card's wall for 4.92 GB of weights" in done.stdout
    code, out, _ = cli_in_process("recipes", "predict", "--model", "llama 8B", "--quant", "Q4_K - Medium", "--json")
    data = json.loads(out)
    cards = {row["card"]: row for row in data["cards"]}
    assert code == 0 and data["weight_bytes"] == round(4.58 * 2 ** 30) and data["engine"] == "llama.cpp"
    h800 = cards["h800-pcie"]  # the JSON row now
    assert (h800["kind"], h800["n"], [b["card"] for b in h800["basis_rows"]]) == \
        ("predicted", 2, ["a100-sxm4-80gb", "h100-pcie"])
    assert set(h800["basis_rows"][0]) == {"card", "model", "quant", "test", "fraction", "bandwidth_gbs", "source"}
    assert (cards["mi300x"]["kind"], cards["mi300x"]["n"], cards["mi300x"]["tok_s"]) == ("no basis", 0, None)
    code, out, _ = cli_in_process("recipes", "predict", "--model", "llama 8B", "--quant", "Q4_K - Medium",
                                  "--markdown")
    assert code == 0 and f"| h800-pcie | datacenter | 406.7 | predicted | 145.6 | 132.5{DASH}145.6 | 35.8 |" in out


# --- filing sources ---------------------------------------------------------------------------------------------------


def test_add_files_a_source_states_what_it_lacks_and_replaces_on_a_second_add(corpus: Path, tmp_path: Path) -> None:
    options = ImportOptions(card="h200", gpus=4, model="llama-3.3-70b", why="TP=4 per the repository")
    (first,) = add([corpus / BENCH / SGLANG], tmp_path, options)
    assert (first.written, first.replaced, len(first.recipes)) == (tmp_path / f"{SGLANG}.json", False, 7)
    assert read_file(first.written) == first.recipes == recipes_of(corpus / BENCH / SGLANG, options)
    assert first.recipes[0].source.stated == ("--card h200", "--model llama-3.3-70b", "--dtype bf16", "--gpus 4",
                                              "why: TP=4 per the repository")
    (again,) = add([corpus / BENCH / SGLANG], tmp_path, options)
    assert again.replaced and len(list(tmp_path.iterdir())) == 1


def test_add_with_one_bad_file_writes_nothing_and_says_so_in_one_line(corpus: Path, tmp_path: Path) -> None:
    bad = tmp_path / "notes.md"
    bad.write_text("# no table here\n", encoding="utf-8")
    folder = tmp_path / "recipes"
    done = run_cli("recipes", "add", str(corpus / BENCH / SGLANG), str(bad), "--dir", str(folder), "--card", "h200")
    assert (done.returncode, done.stdout, done.stderr.count("\n")) == (2, "", 1), done.stderr
    assert str(bad) in done.stderr and not folder.exists()


def test_a_damaged_recipe_file_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"schema": "iotrace.recipe/1", "recipes": [{"card": "l40s"}]}), encoding="utf-8")
    with pytest.raises(InvalidValueError, match=r"r\.json recipe 0 lacks machine, placement"):
        read_file(path)
    good = json.loads((PUBLISHED / f"{SGLANG}.json").read_text(encoding="utf-8"))
    good["recipes"][0]["decode"]["tok_s"] = -1.0
    path.write_text(json.dumps(good), encoding="utf-8")
    with pytest.raises(InvalidValueError, match="not a positive number"):
        read_file(path)
    path.write_text(json.dumps({"schema": "iotrace.recipe/0", "recipes": []}), encoding="utf-8")
    with pytest.raises(InvalidValueError, match="is not a recipe file"):
        read_file(path)


def test_the_cli_lists_writes_and_predicts(tmp_path: Path) -> None:
    code, out, _ = cli_in_process("recipes", "--json")
    assert code == 0 and len(json.loads(out)["recipes"]) == len(RECIPES)
    code, out, _ = cli_in_process("recipes", "--card", "l40s", "--markdown")
    assert code == 0 and "### l40s" in out and "| 7,698.6 |" in out and "| 104.6 |" in out and "| 70.7 |" in out
    page = tmp_path / "atlas.html"
    code, out, _ = cli_in_process("recipes", "--engine", "llama.cpp", "-o", str(page))
    html = page.read_text(encoding="utf-8")
    assert code == 0 and "wrote" in out and "plotly" in html and "rtx4090" in html and "decode wall" in html
    code, out, _ = cli_in_process("recipes", "predict", "--model", "llama 8B", "--quant", "Q4_K", "--json")
    cards = {row["card"]: row for row in json.loads(out)["cards"]}
    assert code == 0 and cards["h100-pcie"]["kind"] == "measured" and cards["h100-pcie"]["tok_s"] == 145.55
    for args, said in ((("recipes", "--dir", str(tmp_path / "none")), "is not a folder of recipes"),
                       (("recipes", "--card", "nope"), "no card called 'nope' in the CardBook"),
                       (("recipes", "predict", "--model", "nope", "--quant", "x"),
                        "no basis: no recipe measured a model matching 'nope'")):
        code, out, err = cli_in_process(*args)
        assert code == 2 and said in err and err.count("\n") == 1


@pytest.mark.slow  # one short run of the pinned model (load and 4 tokens)
def test_an_own_bench_run_becomes_a_recipe(tmp_path: Path) -> None:
    code, out, err = cli_in_process("bench", "--gen-tokens", "4", "--reps", "1", "--json")
    assert code == 0, err
    result = tmp_path / "run.json"
    result.write_text(out, encoding="utf-8")
    data = json.loads(out)
    (recipe,) = recipes_of(result, ImportOptions())
    assert (recipe.engine, recipe.placement, recipe.source.kind) == ("iotrace", "cpu", "own run")
    assert recipe.decode.tok_s == data["decode"][0]["decode_tok_s"]["mean"] and recipe.decode.test == "tg4"
    assert recipe.derived.quality_drop.startswith("none against the file")
    assert recipe.prefill.tok_s == data["prefill"]["tok_s"]["mean"]
    assert recipe.weight_bytes == data["model"]["weight_bytes"] and recipe.source.manifest == data["manifest"]
    assert math.isclose(recipe.bits_per_weight, round(8 * data["model"]["weight_bytes"] / data["model"]["params"], 3))


def test_usage_errors_are_one_line_and_every_recipes_command_takes_json() -> None:
    from iotrace.cli import build_parser

    for args, said in ((("recipes", "add"), "the following arguments are required: FILE"),
                       (("recipes", "add", "x.json", "--ngl", "9,x"), "'9,x' is not whole numbers"),
                       (("recipes", "predict", "--model", "llama 8B"), "required: --quant")):
        done = run_cli(*args)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and said in done.stderr, done.stderr
    recipes = next(a for a in build_parser()._actions if a.dest == "command").choices["recipes"]
    subs = next(a for a in recipes._actions if a.dest == "recipes_command").choices
    for parser in (recipes, subs["add"], subs["predict"]):
        assert any("--json" in a.option_strings for a in parser._actions), parser.prog


ENGINES_RUN = Path(__file__).resolve().parents[1] / "traces" / "where-the-tok-s-went" / "bench-engines.json"


def test_an_engines_run_becomes_one_recipe_per_engine_with_its_decode_gaps(tmp_path: Path) -> None:
    """``bench --engine … --profile --json`` in, a recipe per engine that ran: its figures, the wall of the machine it
    ran on, and its profiled decode step's largest gaps, recomputed here from the saved rows with plain arithmetic."""
    data = json.loads(ENGINES_RUN.read_text(encoding="utf-8"))
    recipes = recipes_of(ENGINES_RUN, ImportOptions())
    assert [r.engine for r in recipes] == [row["engine"] for row in data["engines"] if row["ok"]]
    for recipe, row in zip(recipes, data["engines"], strict=True):
        assert (recipe.placement, recipe.card, recipe.machine) == ("cpu", None, "CPU")
        assert recipe.decode.tok_s == row["decode_tok_s"]["mean"]
        assert recipe.derived.decode_wall_tok_s == row["walls"]["here"]["tok_s"]
        assert recipe.derived.decode_fraction == row["walls"]["here"]["fraction"]
        if "phases" not in row["waterfall"]:  # vLLM's trace here has no step the report finds: no gaps, no guess
            assert (recipe.derived.waterfall, recipe.derived.gaps) == (None, ())
            continue
        decode = next(p for p in row["waterfall"]["phases"] if p["phase"] == "decode")
        rows, span = decode["categories_ns"], decode["span_ns"]
        beyond = {"gemm": rows["gemm"] * (1 - decode["gemm_floor_pct"] / 100),
                  "attention": rows["attention"] * (1 - decode["attention_floor_pct"] / 100)}
        by_hand = sorted(((100 * beyond.get(c, ns) / span, c) for c, ns in rows.items() if beyond.get(c, ns) >= 1),
                         reverse=True)
        labels = row["waterfall"]["categories"]
        assert [label for label, _ in recipe.derived.gaps] == [labels[c] for _, c in by_hand]
        for (_, pct), (want, _) in zip(recipe.derived.gaps, by_hand, strict=True):
            assert pct == pytest.approx(want, abs=0.05)
    (added,) = add([ENGINES_RUN], tmp_path, ImportOptions())
    assert read_file(added.written) == recipes  # the gaps survive the file (lists back to tuples)
    code, out, err = cli_in_process("recipes", "--dir", str(tmp_path), "--json")
    rows = json.loads(out)["recipes"]
    assert code == 0, err
    gapped = [r for r in recipes if r.derived.gaps]
    label, pct = gapped[0].derived.gaps[0]
    code, text, _ = cli_in_process("recipes", "--dir", str(tmp_path), "--markdown")
    assert code == 0 and "| top gap |" in text and f"{label} {pct:.0f}%" in text and len(rows) == len(recipes)
