"""The documentation holds: its examples run, its links resolve, the site builds, the README stays short.

Over README.md and docs/**/*.md (docs/contributing/index.md, "The documentation", states the conventions):

- every ``$ iotrace ...`` line of a ```` ```console ```` block runs and exits 0 with output: each distinct command
  once, however many pages show it (a ``gpu$`` or ``cpu$`` line is shown, not run);
- every ```` ```python ```` block runs and prints something, each distinct block once;
- a block that is deliberately not a program (a sketch, a benchmark pytest collects) has the line
  ``<!-- not run: REASON -->`` right above its opening fence, and is left out; a page whose examples another test
  runs is in :data:`OWN_TESTS`;
- every relative link and ``#anchor`` resolves (README into docs/, each page within docs/), to a heading whose anchor
  is the same on the built site and on a code-hosting site;
- ``mkdocs build --strict`` builds the site: no broken link or anchor, no page missing;
- the README is at most 250 lines.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest

from tests.conftest import CLI_ENV, CORPUS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
#: The most lines the README may have: a newcomer reads it in five minutes; the rest is in docs/.
README_MAX_LINES = 250
#: Pages whose examples another test runs (they need what that test sets up), so they are not run here.
OWN_TESTS = {
    "docs/contributing/plugins.md": "tests/test_plugin_guide.py runs its examples against the plugin it installs",
}

FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(?P<reason>\S.*?)\s*-->\s*$")
COMMAND = re.compile(r"^\$ iotrace (?P<args>.+)$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: str  # relative to the repository
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    not_run: str | None  # the reason given by a `<!-- not run: ... -->` line right above it


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        words = opening["info"].strip().lstrip("{").lstrip(".").split()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not re.match(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[j]):
            body.append(lines[j][indent:] if lines[j][:indent].isspace() else lines[j])
            j += 1
        marker = NOT_RUN.match(lines[i - 1]) if i else None
        found.append(Block(_name(path), i + 1, words[0] if words else "", "\n".join(body) + "\n",
                           marker["reason"] if marker else None))
        i = j + 1
    return found


BLOCKS = [b for page in PAGES for b in blocks(page)]
RUN = [b for b in BLOCKS if b.not_run is None and b.page not in OWN_TESTS]
COMMANDS = list(dict.fromkeys(m["args"] for b in RUN if b.lang == "console"
                              for m in map(COMMAND.match, b.text.splitlines()) if m))
PYTHON = list({b.text: b for b in RUN if b.lang == "python"}.values())


def _needs_corpus(text: str) -> None:
    if "../shared/corpus" in text and not CORPUS.is_dir():
        pytest.skip(f"the example reads the corpus at {CORPUS}, which this clone lacks")


def iotrace(*args: str) -> tuple[int, str, str]:
    """``iotrace ARGS`` in this process: (exit code, stdout, stderr). In process, not a subprocess: the point is that
    the documented command works, and the worker's loaded model and compiled kernels are shared between the
    examples (the process boundary is tests/test_cli.py's: one real subprocess per command family)."""
    from iotrace.cli import main

    out, err = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, CLI_ENV), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's --help
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return code, out.getvalue(), err.getvalue()


# --- what the pages show ----------------------------------------------------------------------------------------


def test_every_command_family_has_an_example() -> None:
    first_words = {" ".join(c.split()[:2]) if c.split()[0] in ("math", "bench") and len(c.split()) > 1
                   and not c.split()[1].startswith("-") else c.split()[0] for c in COMMANDS}
    assert first_words >= {"tour", "cards", "card", "math decode", "math prefill", "math kv", "math roofline",
                           "math spec", "occupancy", "kernels", "run", "tune", "info", "report", "diff", "note",
                           "notes", "bench", "bench import", "quant", "selfcheck"}


def test_the_readme_is_short_and_links_every_page_it_sends_a_reader_to() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move detail into docs/"
    linked = {target.split("#")[0] for _, target in links(README)}
    assert {"docs/index.md", "docs/concepts.md", "docs/contributing/index.md"} <= linked
    assert not re.search(r"\.\./shared/(?!corpus\b)", README.read_text(encoding="utf-8"))  # nothing outside but data


def test_every_not_run_marker_sits_on_a_block_and_every_command_line_is_in_a_console_block() -> None:
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines):
            if line.lstrip().startswith("<!-- not run"):
                assert NOT_RUN.match(line), f"{_name(page)}:{n + 1}: write <!-- not run: REASON -->"
                assert n + 1 < len(lines) and FENCE.match(lines[n + 1]), \
                    f"{_name(page)}:{n + 1}: the marker must sit right above a block's opening fence"
    for block in BLOCKS:
        if block.lang != "console":
            assert not any(COMMAND.match(line) for line in block.text.splitlines()), \
                f"{block.page}:{block.line}: a `$ iotrace` line outside a console block would not be run"


def test_the_notes_page_lists_every_published_note() -> None:
    listed = set(re.findall(r"^\| `(notes/[\w.-]+\.md)` \| \S", (DOCS / "notes.md").read_text(encoding="utf-8"), re.M))
    assert listed == {_name(p) for p in (ROOT / "notes").glob("*.md")}


# --- the examples run -------------------------------------------------------------------------------------------


def _command_params() -> list[object]:
    """Each command; the `quant` ones on the worker that holds the loaded baseline and the quantisation note's measured
    formats (xdist_group "quant-lab": tests/test_notes.py, tests/test_quant_lab.py)."""
    return [pytest.param(c, id=c, marks=[pytest.mark.xdist_group("quant-lab")] if c.split()[0] == "quant" else [])
            for c in COMMANDS]


@pytest.mark.slow  # the commands in process: the model bench, quantisation and kernels under the interpreter
@pytest.mark.parametrize("command", _command_params())
def test_docs_command_runs(command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _needs_corpus(command)
    monkeypatch.chdir(ROOT)  # the examples' paths are relative to the repository
    args = shlex.split(command)
    # Files the examples write (-o, .html) go to a scratch folder, not the checkout.
    args = [str(tmp_path / a) if a.endswith(".html") or (i and args[i - 1] in ("-o", "--output")) else a
            for i, a in enumerate(args)]
    code, out, err = iotrace(*args)
    assert code == 0, f"iotrace {command}: exit {code}: {err}"
    assert out.strip() or err.strip(), f"iotrace {command} printed nothing"


@pytest.mark.slow  # each block in a fresh interpreter, some load the model
@pytest.mark.parametrize("block", PYTHON, ids=[f"{b.page}:{b.line}" for b in PYTHON])
def test_docs_python_runs(block: Block) -> None:
    _needs_corpus(block.text)
    result = subprocess.run([sys.executable, "-c", block.text], capture_output=True, text=True, timeout=120,
                            cwd=ROOT)
    assert result.returncode == 0, f"{block.page}:{block.line}: {result.stderr}"
    assert result.stdout.strip(), f"{block.page}:{block.line} printed nothing"


def test_the_python_api_block_prints_the_known_checks() -> None:
    block = next(b for b in PYTHON if "decode_tokens_per_s" in b.text)  # the Python API page
    result = subprocess.run([sys.executable, "-c", block.text], capture_output=True, text=True, timeout=60,
                            cwd=ROOT)
    assert "69.33" in result.stdout and "1073741824" in result.stdout and "3.3616" in result.stdout


# --- links and the site -----------------------------------------------------------------------------------------

LINK = re.compile(r"!?\[[^\]]*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(?P<hashes>#{1,6})\s+(?P<text>.+?)\s*#*\s*$")


def _prose(path: Path) -> list[tuple[int, str]]:
    """The page's lines outside code blocks, with inline code removed: where links and headings are."""
    fenced = {n for b in blocks(path) for n in range(b.line, b.line + b.text.count("\n") + 2)}
    return [(n, re.sub(r"(`+)(?:(?!\1).)+?\1", "", line))
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1) if n not in fenced]


def links(path: Path) -> list[tuple[int, str]]:
    return [(n, m["target"]) for n, line in _prose(path) for m in LINK.finditer(line)]


def _mkdocs_slug(text: str) -> str:
    from markdown.extensions.toc import slugify

    return slugify(text, "-")


def _github_slug(text: str) -> str:
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of the page's headings that a link can rely on: the same on the MkDocs site and on a
    code-hosting site's rendering of the file (a heading whose two slugs differ gives none)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    fenced = {n for b in blocks(path) for n in range(b.line, b.line + b.text.count("\n") + 2)}
    found = set()
    for n, line in enumerate(lines, start=1):
        heading = HEADING.match(line)
        if heading and n not in fenced:
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading["text"])
            text = re.sub(r"`([^`]*)`", r"\1", text).replace("**", "").replace("*", "")
            if _mkdocs_slug(text) == _github_slug(text):
                found.add(_github_slug(text))
    return found


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    broken = []
    for n, target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        where = f"{_name(page)}:{n}: {target}"
        if not dest.exists():
            broken.append(f"{where}: no such file")
        elif page != README and DOCS not in dest.parents and dest != DOCS:
            broken.append(f"{where}: outside docs/, so not on the site (name the file in a code span instead)")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            broken.append(f"{where}: no heading with that anchor (on the site and on a code-hosting site alike)")
    assert not broken, "\n".join(broken)


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """`mkdocs build --strict`: a broken link or anchor, a page outside the nav or a nav entry without a page fails."""
    pytest.importorskip("mkdocs", reason="mkdocs is not installed: pip install -e '.[docs]' (make does)")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                            capture_output=True, text=True, timeout=300, cwd=ROOT,
                            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})  # Material's banner about MkDocs 2
    assert result.returncode == 0, result.stderr[-4000:]
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "commands" / "traces" / "index.html").is_file()
