"""What the CLI writes into a pipe or a file, and the first-use rough edges: every cell whole at natural width,
``--wide``, negative numbers as values, a note without a browser, and messages that fit their command.

The pipe tests run the CLI as a real subprocess with stdout redirected to a file and ``COLUMNS`` unset (unlike
``run_cli``, which sets it), which is what ``iotrace cards > f`` does; so does the terminal test (a pty). The rest
call the CLI in this process with ``COLUMNS`` set (what they check is the text at a given width, not the process),
but for one real subprocess each of an argparse refusal (``math``) and ``card``'s own refusal.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.conftest import run_cli_in_process as _in_process

TENSORRT = "nsys/rtx3090_tensorrt_memfusion_nsys2023.1.sqlite"
UNCOALESCED = "ncu-rep/rtx4050laptop_rgb_uncoalesced_memchart_ncu2023.3.ncu-rep"
COALESCED = "ncu-rep/rtx4050laptop_rgb_coalesced_memchart_ncu2023.3.ncu-rep"
RGB = "ncu-rep/rtx4050laptop_rgb_brightness_ncu2023.3.ncu-rep"


def _piped(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``iotrace ARGS > file`` with no COLUMNS: the exit code, what the file holds, and stderr."""
    full_env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    full_env.update(NO_COLOR="1", **(env or {}))
    out = tmp_path / "stdout.txt"
    with out.open("w", encoding="utf-8") as handle:
        done = subprocess.run([sys.executable, "-m", "iotrace", *args], stdout=handle, stderr=subprocess.PIPE,
                              text=True, env=full_env, timeout=120)
    return done.returncode, out.read_text(encoding="utf-8"), done.stderr



def _cells(text: str) -> list[list[str]]:
    """The cells of every row of a boxed rich table."""
    return [[cell.strip() for cell in line.strip("│").split("│")] for line in text.splitlines()
            if line.startswith("│")]


def _whole(name: str) -> str:
    return " ".join(name.split())  # renderers collapse runs of whitespace in a name, nothing more


def test_cards_into_a_file_keep_every_name_and_sm_count(tmp_path: Path) -> None:
    from iotrace.cards import card_book

    code, text, err = _piped(tmp_path, "cards")
    assert code == 0, err
    rows = {cells[0]: cells for cells in _cells(text)}
    for card in card_book():
        assert rows[card.key][1] == card.name, rows.get(card.key)
        assert rows[card.key][3] == str(card.sm_count), rows[card.key]
    assert "…" not in text


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_kernels_into_a_file_and_with_wide_name_every_kernel_in_full(tmp_path: Path) -> None:
    names = [row["name"] for row in json.loads(_in_process("kernels", "--json").stdout)]
    assert len(names) >= 2
    code, text, err = _piped(tmp_path, "kernels")
    assert code == 0, err
    assert sorted(cells[0] for cells in _cells(text) if cells[0]) == sorted(names)
    # In an 80-column "terminal" (COLUMNS set) the names are cut; --wide shows them whole there too.
    wide = _in_process("kernels", "--wide", env={"COLUMNS": "80"})
    assert wide.returncode == 0, wide.stderr
    assert sorted(cells[0] for cells in _cells(wide.stdout) if cells[0]) == sorted(names)


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_run_into_a_file_keeps_the_config_whole_and_names_both_spill_counts(tmp_path: Path) -> None:
    code, text, err = _piped(tmp_path, "run", "gemm", "--card", "h100", "--shape", "M=64,N=64,K=64", "--seed", "1")
    assert code == 0, err
    (config,) = [line for line in text.splitlines() if line.startswith("  config ")]
    assert "USE_TMA=False" in config.split()[-1].split(","), config
    (resources,) = [line for line in text.splitlines() if "resources" in line]
    assert "B spill stores + " in resources and "B spill loads" in resources, resources
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 300  # whole, and no line padded


def test_info_wide_and_into_a_file_name_every_distinct_kernel_in_full(corpus: Path, tmp_path: Path) -> None:
    trace = str(corpus / TENSORRT)
    listed = json.loads(_in_process("info", trace, "--json", "--top", "40").stdout)["top_kernels"]
    names = {_whole(k["name"]) for k in listed}
    assert len(names) > 5
    wide = _in_process("info", trace, "--top", "40", "--wide", env={"COLUMNS": "250"})
    assert wide.returncode == 0, wide.stderr
    assert all(name in wide.stdout for name in names)
    assert "…" not in wide.stdout
    code, text, err = _piped(tmp_path, "info", trace, "--top", "40")
    assert code == 0, err
    assert all(name in text for name in names)


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_report_and_diff_into_a_file_and_with_wide_name_every_kernel_in_full(corpus: Path, tmp_path: Path) -> None:
    trace = str(corpus / TENSORRT)
    names = {_whole(k["name"]) for k in json.loads(_in_process("report", trace, "--json").stdout)["kernels"]}
    code, text, err = _piped(tmp_path, "report", trace)
    assert code == 0, err
    assert all(name in text for name in names)
    wide = _in_process("report", trace, "--wide", env={"COLUMNS": "100"})
    assert wide.returncode == 0, wide.stderr
    assert all(name in wide.stdout for name in names)
    narrow = _in_process("report", trace, env={"COLUMNS": "100"})  # a terminal's width: cut to fit, as before
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 100
    out = tmp_path / "report.txt"
    assert _in_process("report", trace, "-o", str(out)).returncode == 0
    assert all(name in out.read_text(encoding="utf-8") for name in names)
    diff = _in_process("diff", str(corpus / UNCOALESCED), str(corpus / COALESCED), "--wide", env={"COLUMNS": "60"})
    assert diff.returncode == 0, diff.stderr
    (row,) = json.loads(_in_process("diff", str(corpus / UNCOALESCED), str(corpus / COALESCED), "--json").stdout)[
        "kernels"]
    assert _whole(row["after"]) in diff.stdout


@pytest.mark.parametrize(("flag", "value", "rest"), [
    ("--params", "-27e9", ["math", "decode", "--bits", "4", "--card", "rtx3090"]),
    ("--params", "-1.5k", ["math", "decode", "--bits", "4", "--card", "rtx3090"]),
    ("--tokens", "-8k", ["math", "kv", "--model", "llama-3-8b"]),
])
def test_a_negative_number_after_a_space_is_a_value(flag: str, value: str, rest: list[str]) -> None:
    run = run_cli if value == "-27e9" else _in_process  # one through a real process: argparse's exit 2, one line
    result = run(*rest, flag, value)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "expected one argument" not in lines[0], lines
    assert "must be a positive finite number" in lines[0]
    joined = _in_process(*rest, f"{flag}={value}")
    assert joined.stderr == result.stderr  # `--params -27e9` and `--params=-27e9` get the same answer


# A note without a browser: tests/test_note_no_browser.py (real subprocesses, kaleido's own browser search).


def test_a_figure_that_fails_leaves_no_empty_img_folder_and_a_whole_word_message(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from iotrace.notes import images
    from iotrace.notes.document import Image, Note

    class Broken:
        def write_image(self, *args: object, **kwargs: object) -> None:
            raise RuntimeError("Kaleido needs Chrome " + "installed and working " * 20)

    monkeypatch.setattr(images, "figure_problem", lambda: None)  # as if a browser were there
    note = Note("n", "N", {})
    note.images.append(Image("n.png", Broken(), "broken"))
    with pytest.raises(images.ImageExportError) as raised:
        images.write_images(note, tmp_path / "img")
    assert not (tmp_path / "img").exists()
    reason = raised.value.problem.split(": ", 2)[-1]
    assert reason.endswith(" …") and reason[:-2].split()[-1] in ("installed", "and", "working")


def test_card_without_a_name_advises_its_own_form() -> None:
    from iotrace.cards import local_device

    if local_device() is not None:
        pytest.skip("this machine has a GPU, so `iotrace card` describes it")
    result = run_cli("card", env={"IOTRACE_CARD": ""})  # `card` through a real process
    assert result.returncode == 2
    assert result.stderr.strip().endswith("give a card name: iotrace card h100, or set IOTRACE_CARD "
                                          "(see `iotrace cards`)"), result.stderr
    assert "--card" not in result.stderr
    other = _in_process("math", "decode", "--params", "8e9", "--bits", "4", env={"IOTRACE_CARD": ""})
    assert other.returncode == 2 and "pass --card NAME" in other.stderr  # commands that take --card keep it


def test_cupti_help_is_a_whole_sentence() -> None:
    result = _in_process("run", "--help")
    assert result.returncode == 0
    assert "(Kineto/CUPTI): needs a GPU but no Nsight tool" in " ".join(result.stdout.split())


def test_a_terminal_keeps_its_width(tmp_path: Path) -> None:
    """Into a real terminal (a pty of 80 columns) the tables still fit it: natural width is for pipes and files."""
    pty = pytest.importorskip("pty")
    import fcntl
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["NO_COLOR"] = "1"
    done = subprocess.Popen([sys.executable, "-m", "iotrace", "cards"], stdout=follower, stderr=subprocess.PIPE,
                            env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert done.wait(timeout=60) == 0
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode("utf-8", "replace"))  # styles
    lines = text.replace("\r", "").splitlines()
    assert lines and max(len(line) for line in lines) <= 80
