"""``iotrace note`` without a browser writes the note without figures and says in one line how to add them; on any
failure (a damaged trace, a browser that dies midway) it leaves nothing half-written behind.

Real subprocesses throughout. "No browser" is made the way kaleido itself sees it: ``BROWSER_PATH`` names a file
that does not exist (choreographer returns that path, kaleido refuses it: "No browser found at BROWSER_PATH"), and
``XDG_DATA_HOME`` points into tmp_path so a Chrome fetched by ``kaleido_get_chrome`` is not found either.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli

TRACE = "kineto/a100_pg509_alexnet_kineto_trace.json.gz"
needs_kaleido = pytest.mark.skipif(importlib.util.find_spec("kaleido") is None,
                                   reason="kaleido is not installed: there is no figure export to fail")


def _no_browser(tmp_path: Path) -> dict[str, str]:
    from choreographer.cli._cli_utils import get_old_chrome_download_path

    old = get_old_chrome_download_path()  # inside the installed package, found whatever the environment says
    if old is not None and old.exists():
        pytest.skip(f"choreographer finds the Chrome downloaded into its package ({old}) whatever BROWSER_PATH says")
    return {"BROWSER_PATH": str(tmp_path / "no-such-chrome"), "XDG_DATA_HOME": str(tmp_path / "xdg")}


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() if p.is_file() else b"<dir>"
            for p in sorted(folder.rglob("*"))}


@needs_kaleido
def test_without_a_browser_the_note_is_written_without_images(tmp_path: Path, corpus: Path) -> None:
    out = tmp_path / "notes" / "alexnet.md"
    done = run_cli("note", str(corpus / TRACE), "--title", "AlexNet", "-o", str(out), env=_no_browser(tmp_path))
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert text.startswith("# AlexNet\n") and "## 1. The kernels" in text
    assert "![" not in text and "img/" not in text  # no link to a figure that was not drawn
    assert sorted(os.listdir(out.parent)) == ["alexnet.md"]  # no img/, no staging folder
    notice = done.stderr.strip().splitlines()
    assert len(notice) == 1, done.stderr
    assert notice[0].startswith("iotrace: wrote the note without images: no Chrome or Chromium for kaleido")
    assert "apt-get install chromium" in notice[0] and "kaleido_get_chrome" in notice[0] and "rerun" in notice[0]
    assert done.stdout == f"wrote {out}\n"
    # --no-images: the same note, on purpose, without the notice
    again = run_cli("note", str(corpus / TRACE), "--title", "AlexNet", "-o", str(out), "--no-images",
                    env=_no_browser(tmp_path))
    assert again.returncode == 0 and again.stderr == "" and "![" not in out.read_text()


def test_a_damaged_trace_leaves_nothing_new(tmp_path: Path, corpus: Path) -> None:
    damaged = tmp_path / "damaged.json.gz"
    damaged.write_bytes((corpus / TRACE).read_bytes()[:5000])
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "alexnet.md").write_text("# an older note\n")
    before = _tree(dest)
    for out in (dest / "alexnet.md", dest / "new" / "deeper" / "fresh.md"):
        done = run_cli("note", str(damaged), "--title", "x", "-o", str(out))
        assert done.returncode == 2
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("iotrace: error: ")
        assert "truncated gzip" in done.stderr
        assert _tree(dest) == before  # the older note as it was; no img/, no new/, no staging folder


@needs_kaleido
@pytest.mark.skipif(os.name != "posix", reason="the stand-in browser is a shell script")
@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_a_browser_failing_midway_leaves_nothing_half_written(tmp_path: Path, corpus: Path) -> None:
    """A program that is there but is no browser: kaleido starts it, it exits, the figure fails after the export
    began. The older note stays, and neither img/ nor the folders -o named are left behind."""
    fake = tmp_path / "fake-chrome"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    env = {**_no_browser(tmp_path), "BROWSER_PATH": str(fake)}
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "alexnet.md").write_text("# an older note\n")
    before = _tree(dest)
    for out in (dest / "alexnet.md", dest / "new" / "fresh.md"):
        done = run_cli("note", str(corpus / TRACE), "--title", "x", "-o", str(out), env=env)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("iotrace: error: cannot write "), done.stderr
        assert f"{out.parent / 'img'}" in done.stderr and ".partial" not in done.stderr
        assert _tree(dest) == before


@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="a note's PNG figures need Chromium for kaleido (make test installs it where it can)")
@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_with_a_browser_the_figures_are_written_and_linked(tmp_path: Path, corpus: Path) -> None:
    out = tmp_path / "alexnet.md"
    done = run_cli("note", str(corpus / TRACE), "--title", "AlexNet", "-o", str(out))
    assert done.returncode == 0 and done.stderr == "", done.stderr
    png = tmp_path / "img" / "alexnet-trace-roofline.png"
    assert png.read_bytes()[:4] == b"\x89PNG" and "![hierarchical roofline](img/alexnet-trace-roofline.png)" in \
        out.read_text()
    assert sorted(os.listdir(tmp_path)) == ["alexnet.md", "img"]  # the staging folder is gone
