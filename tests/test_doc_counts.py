"""The counts the README and the docs state are the ones the CLI and the registries give now.

A page that says "46 named GPUs" when `iotrace cards` lists 57, or names four known models where `--model` takes six,
is a number a newcomer cannot trust. Each stated count (and each list that stands for one) is found on its page by a
pattern and compared with its source: the CardBook through `iotrace cards --json`, the known models through
``iotrace.model_shapes.models()`` (what `--model` reads), the built-in kernels through `iotrace kernels --json`, the
published recipes through `iotrace recipes --json`. A page that drops the sentence fails too: a count moved out of
sight is found here, not left stale.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import cli_in_process

ROOT = Path(__file__).resolve().parents[1]


def _page(name: str) -> str:
    # Whitespace runs as one space: a sentence may wrap anywhere on the page.
    return " ".join((ROOT / name).read_text(encoding="utf-8").split())


def _cli_json(*args: str) -> object:
    code, out, err = cli_in_process(*args, "--json")
    assert code == 0, err
    return json.loads(out)


#: Where a page states how many cards the CardBook holds: (page, pattern with the count as its group).
CARD_COUNTS = [
    ("README.md", r"(\d+) named GPUs, NVIDIA's and AMD's"),
    ("docs/index.md", r"The CardBook, (\d+) named GPUs"),
    ("docs/commands/cards.md", r"The CardBook \(`iotrace/data/cards\.toml`\): (\d+) cards"),
]

#: How each built-in kernel is named in the prose lists of the README and docs/index.md ("Triton kernels (GEMM, ...").
KERNEL_PHRASES = {"gemm": "GEMM", "rmsnorm": "RMSNorm", "attention-prefill": "FlashAttention prefill",
                  "attention-decode": "decode", "attention-decode-int8": "INT8-KV decode", "rope": "RoPE",
                  "swiglu": "SwiGLU", "gemm-decode": "decode GEMM", "draft-verify": "speculative verify"}


@pytest.mark.parametrize(("page", "pattern"), CARD_COUNTS, ids=[p for p, _ in CARD_COUNTS])
def test_the_card_count_is_the_cardbooks(page: str, pattern: str) -> None:
    found = re.findall(pattern, _page(page))
    assert found, f"{page} no longer states the CardBook's size as {pattern!r}: update CARD_COUNTS"
    cards = len(_cli_json("cards"))
    assert {int(n) for n in found} == {cards}, f"{page} says {', '.join(found)} cards; `iotrace cards` lists {cards}"


def test_the_known_models_are_the_ones_model_takes() -> None:
    from iotrace.model_shapes import models

    text = _page("docs/commands/cards.md")
    listed = re.search(r"Known models \(`--model`\): (.*?) \(`iotrace/data/models\.toml`\)", text)
    assert listed, "docs/commands/cards.md no longer lists the known models after 'Known models (`--model`):'"
    named = re.findall(r"`([^`]+)`", listed.group(1))
    assert sorted(named) == sorted(models()), f"the page lists {named}; --model takes {list(models())}"


def test_the_builtin_kernels_are_the_ones_listed() -> None:
    builtin = sorted(row["name"] for row in _cli_json("kernels") if str(row.get("plugin", "")).startswith("iotrace."))
    table = re.findall(r"^\| `([a-z0-9-]+)` \|", (ROOT / "docs/commands/kernels.md").read_text(), re.M)
    assert sorted(table) == builtin, f"docs/commands/kernels.md's table lists {table}; built in: {builtin}"
    assert sorted(KERNEL_PHRASES) == builtin, "a built-in kernel has no phrase in KERNEL_PHRASES: add how the README "\
                                              "and docs/index.md name it"
    for page, pattern in (("README.md", r"Triton kernels \(([^)]*)\)"),
                          ("docs/index.md", r"Triton kernels as plugins \(([^)]*)\)")):
        listed = re.search(pattern, _page(page))
        assert listed, f"{page} no longer lists the kernels as {pattern!r}"
        missing = [k for k, phrase in KERNEL_PHRASES.items() if phrase not in listed.group(1)]
        assert not missing, f"{page}'s kernel list ({listed.group(1)}) leaves out {missing}"


def test_the_recipe_counts_are_the_published_sets() -> None:
    recipes = _cli_json("recipes")["recipes"]
    cards = len({r["card"] for r in recipes if r["card"]})
    files = len({r["source"]["file"] for r in recipes})
    stated = re.search(r"holds (\d+) recipes from (\d+) published files on (\d+) named cards",
                       _page("docs/commands/recipes.md"))
    assert stated, "docs/commands/recipes.md no longer states the published set's size"
    assert tuple(map(int, stated.groups())) == (len(recipes), files, cards)
    note = re.search(r"(\d+) published llama\.cpp, vLLM and SGLang runs on (\d+) named cards", _page("docs/notes.md"))
    assert note, "docs/notes.md no longer states the recipes note's size"
    assert tuple(map(int, note.groups())) == (len(recipes), cards)
