"""``-o FILE`` writes what its extension says, for every command that takes ``-o``; an extension a command cannot
write, or one that disagrees with ``--format``, is one line and exit 2, and nothing is written.

In process (:func:`tests.conftest.cli_in_process`): the point is the file each command writes, not the process.
PNG and SVG go through kaleido and a Chromium browser: where either is missing the test checks the refusal (one line,
exit 2, naming the missing piece) instead, saying so in its id's skip-free assertion.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import CORPUS, cli_in_process, cli_parsers

ROOT = Path(__file__).resolve().parents[1]
RGB = "ncu-rep/rtx4050laptop_rgb_brightness_ncu2023.3.ncu-rep"
UNCOALESCED = "ncu-rep/rtx4050laptop_rgb_uncoalesced_memchart_ncu2023.3.ncu-rep"
COALESCED = "ncu-rep/rtx4050laptop_rgb_coalesced_memchart_ncu2023.3.ncu-rep"
SWEEP = ROOT / "bench" / "sweeps" / "gemm-h100-sxm-square-4096-BLOCK_K64-synth.json"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _report() -> list[str]:
    return ["report", str(CORPUS / RGB)]


def _ranks() -> list[str]:
    return ["report", str(CORPUS / "kineto-ranks")]


def _diff() -> list[str]:
    return ["diff", str(CORPUS / UNCOALESCED), str(CORPUS / COALESCED)]


def _occupancy() -> list[str]:
    return ["occupancy", "--cc", "8.6", "--threads", "256", "--regs", "64"]


def _math_occupancy() -> list[str]:
    return ["math", *_occupancy()]


def _tune() -> list[str]:
    return ["tune", "gemm", "--replay", str(SWEEP), "--strategy", "model", "--budget", "27"]


def _recipes() -> list[str]:
    return ["recipes", "--card", "l40s"]


def _serve() -> list[str]:
    return ["bench", "serve", "--engine", "llama.cpp"]


def _note() -> list[str]:
    return ["note", str(CORPUS / RGB), "--title", "RGB", "--no-images"]


#: Every command that takes -o: (its argv without -o, whether it needs the corpus, what it writes, what it refuses).
COMMANDS = {
    "report": (_report, True, (".txt", ".md", ".html", ".json", ".png", ".svg"), (".csv", ".pdf")),
    "report (across ranks)": (_ranks, True, (".txt", ".md", ".html", ".json"), (".csv",)),
    "diff": (_diff, True, (".txt", ".md", ".json"), (".html", ".png")),
    "occupancy": (_occupancy, False, (".html", ".png", ".svg", ".json", ".md", ".txt"), (".csv",)),
    "math occupancy": (_math_occupancy, False, (".html", ".json", ".md", ".txt"), (".pdf",)),
    "tune": (_tune, False, (".html", ".png", ".json", ".txt"), (".md", ".csv")),
    "note": (_note, True, (".md",), (".html", ".txt")),
    "recipes": (_recipes, False, (".html", ".json", ".md", ".txt"), (".csv", ".pdf")),
    # What it writes needs a server: the chart (.html) and the result (.json) through a real server process in
    # tests/test_bench_serve.py, the PNG through the engines' own in tests/test_bench_serve_engines.py. Here: the
    # refusals, which come before any server starts.
    "bench serve": (_serve, False, (), (".csv", ".pdf")),
}

WRITES = [(name, ext) for name, (_, _, writes, _) in COMMANDS.items() for ext in writes]
REFUSES = [(name, ext) for name, (_, _, _, refuses) in COMMANDS.items() for ext in refuses]


def _argv(name: str) -> list[str]:
    build, needs_corpus, _, _ = COMMANDS[name]
    if needs_corpus and not CORPUS.is_dir():
        pytest.skip(f"real-data corpus not found at {CORPUS}: this clone has no ../shared/corpus beside it")
    return build()


def _run(*args: str) -> tuple[int, str, str]:
    """``iotrace ARGS`` in process; an argparse exit is an exit code like any other."""
    try:
        return cli_in_process(*args)
    except SystemExit as exc:  # argparse's usage errors end the parse with SystemExit(2)
        return int(exc.code or 0), "", ""


def _image_problem() -> str | None:
    from iotrace.render.image_export import export_problem

    problem = export_problem()
    return None if problem is None else str(problem)


def _commands_with_output() -> set[str]:
    """Every (sub)command of the CLI with an -o option, as "math occupancy"."""
    return {" ".join(path) for path, parser in cli_parsers()
            if any("-o" in a.option_strings for a in parser._actions)}


def test_the_table_covers_every_command_with_o() -> None:
    """A command given -o later must be added to COMMANDS, so its extensions are checked too."""
    assert _commands_with_output() == {name.split(" (")[0] for name in COMMANDS}


def _check_format(path: Path, ext: str) -> None:
    data = path.read_bytes()
    assert data, f"{path} is empty"
    if ext == ".png":
        assert data[:8] == PNG_MAGIC
        return
    text = data.decode("utf-8")
    if ext == ".html":
        assert re.match(r"\s*<(!doctype html|html)", text, re.IGNORECASE), text[:80]
    elif ext == ".svg":
        assert "<svg" in text[:2000]
    elif ext == ".json":
        assert isinstance(json.loads(text), (dict, list))
    elif ext == ".md":
        assert re.search(r"^#{1,6} \S", text, re.MULTILINE) or re.search(r"^\|.*\|\s*$", text, re.MULTILINE), \
            text[:200]
        assert "<html" not in text.lower()
    else:  # .txt: the terminal's text, no markup, no colour
        assert not text.lstrip().startswith(("<", "{", "[", "#")), text[:80]
        assert "\x1b[" not in text and "…" not in text  # no colour, no cell cut
        # No line over 300 characters but the list of full kernel names under a table ("  [3] void ...").
        assert max(len(line) for line in text.splitlines() if not re.match(r"\s*\[\d+\] ", line)) <= 300


@pytest.mark.parametrize(("name", "ext"), WRITES, ids=[f"{n} {e}" for n, e in WRITES])
@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_o_writes_what_its_extension_says(name: str, ext: str, tmp_path: Path) -> None:
    argv = _argv(name)
    out = tmp_path / f"out{ext}"
    code, stdout, stderr = _run(*argv, "-o", str(out))
    problem = _image_problem() if ext in (".png", ".svg") else None
    if problem is not None:
        # No kaleido or no browser here: the refusal is one line, exit 2, naming the missing piece; nothing written.
        assert code == 2, (stdout, stderr)
        assert stderr.count("\n") == 1 and stderr.startswith("iotrace: error: ") and \
            ("Chromium" in stderr or "kaleido" in stderr), stderr
        assert not out.exists()
        return
    assert code == 0, stderr
    _check_format(out, ext)
    assert f"wrote {out}" in stdout


@pytest.mark.parametrize(("name", "ext"), REFUSES, ids=[f"{n} {e}" for n, e in REFUSES])
def test_an_extension_a_command_cannot_write_is_one_line_naming_what_it_can(name: str, ext: str,
                                                                            tmp_path: Path) -> None:
    _, _, writes, _ = COMMANDS[name]
    out = tmp_path / f"out{ext}"
    code, stdout, stderr = _run(*_argv(name), "-o", str(out))
    assert code == 2 and stdout == "", (stdout, stderr)
    (line,) = stderr.splitlines()
    assert line.startswith("iotrace: error: ") and str(out) in line, line
    assert all(can in line for can in writes), line
    assert not out.exists()


@pytest.mark.parametrize(("name", "given", "ext"), [
    ("report", ["--format", "md"], ".html"),
    ("report", ["--format", "html"], ".txt"),
    ("report", ["--json"], ".md"),
    ("diff", ["--format", "json"], ".md"),
])
def test_a_format_that_disagrees_with_the_extension_is_refused(name: str, given: list[str], ext: str,
                                                               tmp_path: Path) -> None:
    out = tmp_path / f"out{ext}"
    code, stdout, stderr = _run(*_argv(name), *given, "-o", str(out))
    assert code == 2 and stdout == ""
    (line,) = stderr.splitlines()
    assert line.startswith(f"iotrace: error: {given[0]}") and "disagree" in line and str(out) in line, line
    assert not out.exists()


def test_a_format_that_agrees_and_a_file_without_an_extension(tmp_path: Path) -> None:
    """--format given with its own extension is fine; a file without an extension gets --format's (or the text)."""
    argv = _argv("report")
    agreed = tmp_path / "r.md"
    assert _run(*argv, "--format", "md", "-o", str(agreed))[0] == 0
    _check_format(agreed, ".md")
    bare = tmp_path / "report"
    assert _run(*argv, "--format", "json", "-o", str(bare))[0] == 0
    assert json.loads(bare.read_text())["kernels"]
    text = tmp_path / "plain"
    assert _run(*argv, "-o", str(text))[0] == 0
    _check_format(text, ".txt")
    # A figure command has no default: a bare name is refused, naming the extensions it writes.
    code, _, stderr = _run(*_occupancy(), "-o", str(tmp_path / "curves"))
    assert code == 2 and "has no extension" in stderr and ".html" in stderr


def test_report_txt_is_the_terminal_text_and_the_file_holds_each_kernel(tmp_path: Path) -> None:
    """The .txt a report writes is what a pipe gets, and names its kernels: the same text either way."""
    argv = _argv("report")
    out = tmp_path / "r.txt"
    assert _run(*argv, "-o", str(out))[0] == 0
    text = out.read_text()
    assert "Kernels (" in text and "rgb_increase_brightness_pass_ready" in text
    data = json.loads(_run(*argv, "--json")[1])
    assert all(k["name"].split("(")[0] in text for k in data["kernels"])


def test_occupancy_json_file_holds_the_answer_and_its_curves(tmp_path: Path) -> None:
    out = tmp_path / "occ.json"
    code, stdout, _ = _run(*_occupancy(), "-o", str(out))
    assert code == 0 and "occupancy = 66.67 %" in stdout  # the answer is still printed
    data = json.loads(out.read_text())
    assert data["active_warps_per_sm"] == 32 and data["limiters"] == ["registers"]
    assert {p["x"]: p["active_warps_per_sm"] for p in data["curves"]["registers"]}[64] == 32
    md = tmp_path / "occ.md"
    assert _run(*_occupancy(), "-o", str(md))[0] == 0
    assert "| registers | 4 | binds |" in md.read_text()


def test_an_export_that_lost_kaleidos_page_load_race_is_tried_again_and_nothing_else_is() -> None:
    """kaleido 1.x can evaluate in the blank page's JavaScript context on a loaded machine ("kaleido_scopes is not
    defined"): that error gets a fresh try, up to TRIES in all; any other error is raised on the first."""
    from iotrace.render.image_export import RACE, TRIES, with_kaleido_retry

    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < TRIES:
            raise RuntimeError(f"JavascriptError: ReferenceError: {RACE}")
        return "png"

    assert with_kaleido_retry(flaky) == "png" and len(calls) == TRIES
    calls.clear()

    def always() -> str:
        calls.append(1)
        raise RuntimeError(f"ReferenceError: {RACE}")

    with pytest.raises(RuntimeError, match=RACE):
        with_kaleido_retry(always)
    assert len(calls) == TRIES
    calls.clear()

    def broken() -> str:
        calls.append(1)
        raise RuntimeError("Chromium exited")

    with pytest.raises(RuntimeError, match="Chromium exited"):
        with_kaleido_retry(broken)
    assert len(calls) == 1
