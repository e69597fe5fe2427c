"""The README's examples are runnable: every `$ iotrace ...` line exits 0 and every python block runs."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CORPUS, run_cli

# make test-fast leaves these out: every README command runs in a subprocess (about 2.5 minutes in all).
pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[1] / "README.md"
TEXT = README.read_text(encoding="utf-8")
COMMANDS = re.findall(r"^\$ iotrace (.+)$", TEXT, flags=re.MULTILINE)
# Blocks with "..." are sketches of a plugin, not programs.
PYTHON_BLOCKS = [b for b in re.findall(r"```python\n(.*?)```", TEXT, flags=re.DOTALL) if "..." not in b]


def test_readme_has_examples_for_every_command() -> None:
    first_words = {c.split()[0] if c.split()[0] != "math" else " ".join(c.split()[:2]) for c in COMMANDS}
    assert first_words >= {"tour", "cards", "card", "math decode", "math prefill", "math kv", "math roofline",
                           "math spec", "occupancy", "kernels", "run"}


@pytest.mark.parametrize("command", COMMANDS)
def test_readme_command_runs(command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if "../shared/corpus" in command and not CORPUS.is_dir():
        pytest.skip(f"the example reads the corpus at {CORPUS}, which this clone lacks")
    args = shlex.split(command)
    # Files the examples write (-o, .html) go to a scratch folder, not the checkout.
    args = [str(tmp_path / a) if a.endswith(".html") or (i and args[i - 1] in ("-o", "--output")) else a
            for i, a in enumerate(args)]
    result = run_cli(*args)
    assert result.returncode == 0, f"iotrace {command}: {result.stderr}"
    assert result.stdout.strip()


@pytest.mark.parametrize("block", PYTHON_BLOCKS)
def test_readme_python_runs(block: str) -> None:
    if "../shared/corpus" in block and not CORPUS.is_dir():
        pytest.skip(f"the example reads the corpus at {CORPUS}, which this clone lacks")
    result = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()


def test_readme_python_prints_the_known_checks() -> None:
    block = next(b for b in PYTHON_BLOCKS if "decode_tokens_per_s" in b)  # the Python API section
    result = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, timeout=60)
    assert "69.33" in result.stdout and "1073741824" in result.stdout and "3.3616" in result.stdout
