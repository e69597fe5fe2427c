"""The matrix (Tensor Core) instructions a Triton unit compiles to: PTX ``mma``/``wgmma``/``tcgen05.mma`` and the
SASS opcodes ptxas lowers them to, each with its static count in the compiled kernel.

Compiled on the CPU in a worker process (``python -m iotrace.compiler.mma``, with the interpreter off, as
:mod:`iotrace.compiler.worker`); the PTX comes from Triton's compiled kernel and the SASS from the ``nvdisasm``
Triton ships in its wheel (``triton/backends/nvidia/bin``), so ``sass`` is empty where that tool is missing. Results
are cached beside the compiled resources, under the same key (:func:`iotrace.compiler.disk_cache.cache_key`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass

from iotrace.compiler.disk_cache import cache_dir, cache_key
from iotrace.compiler.errors import CompileError
from iotrace.compiler.pool import COMPILE_TIMEOUT_S
from iotrace.compiler.resources import cc_number
from iotrace.compiler.triton_target import WORKER_ENV
from iotrace.plugins.spec import TritonUnit

__all__ = ["MmaUse", "mma_instructions", "ptx_mma", "sass_mma"]

#: PTX matrix instructions: warp-level mma.sync (PTX ISA, "Warp Level Matrix Multiply-Accumulate Instructions"),
#: warpgroup wgmma.mma_async ("Asynchronous Warpgroup Level Matrix Multiply-Accumulate") and tcgen05.mma (sm_100).
_PTX = re.compile(r"^\s*(?:@!?%\w+\s+)?((?:wgmma\.mma_async|tcgen05\.mma|mma)\.[\w:.]+)", re.M)
#: SASS matrix opcodes, as ncu's per-opcode table names them (iotrace.trace.reports.tensor_flops: HMMA, IMMA, DMMA,
#: BMMA, QMMA, OMMA; the warpgroup HGMMA, IGMMA, QGMMA, BGMMA; tcgen05's UTC*MMA). HFMA2.MMA is no match: it is an
#: element-wise FMA that only runs on the tensor pipe.
_SASS = re.compile(r"(?<![\w.])((?:[HIDBQO]MMA|[HIQB]GMMA|UTC\w*MMA)(?:\.[\w]+)*)")


@dataclass(frozen=True)
class MmaUse:
    """The matrix instructions of one compiled kernel: instruction -> how many times it appears in the code."""

    target: str
    ptx: dict[str, int]
    sass: dict[str, int]


def _counts(pattern: re.Pattern[str], text: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for match in pattern.finditer(text):
        found[match.group(1)] = found.get(match.group(1), 0) + 1
    return dict(sorted(found.items()))


def ptx_mma(ptx: str) -> dict[str, int]:
    """PTX matrix instructions in ``ptx`` with their static counts (``mma.sync.aligned.m16n8k16...``: 32)."""
    return _counts(_PTX, ptx)


def sass_mma(sass: str) -> dict[str, int]:
    """SASS matrix opcodes in a disassembly with their static counts (``HMMA.16816.F32.BF16``: 32)."""
    return _counts(_SASS, sass)


def _compile_one(unit: TritonUnit, cc: int) -> dict[str, object]:
    from iotrace.compiler.triton_target import compile_unit

    compiled, _ = compile_unit(unit, cc)
    try:
        sass = sass_mma(compiled.asm["sass"])
    except Exception:  # no nvdisasm/cuobjdump beside Triton: the PTX still answers
        sass = {}
    return asdict(MmaUse(f"sm_{cc}", ptx_mma(compiled.asm["ptx"]), sass))


def _worker_main() -> None:
    """A job (``{"cc": 90, "units": [...]}``) on stdin; one JSON line of answers, an error dict per failed unit."""
    job = json.loads(sys.stdin.read())
    answers = []
    for fields in job["units"]:
        fields["grid"] = tuple(fields["grid"])
        try:
            answers.append(_compile_one(TritonUnit(**fields), job["cc"]))
        except CompileError as exc:
            answers.append({"error": exc.problem, "fix": exc.fix})
    print(json.dumps(answers))


def mma_instructions(units: list[TritonUnit], cc: str | tuple[int, int]) -> list[MmaUse]:
    """The matrix instructions of each unit compiled for ``cc``, from the cache or one worker process for the rest.
    A unit that does not compile raises its :class:`CompileError`."""
    target = cc_number(cc)
    keys = [cache_key(u, target) + "-mma" for u in units]
    results: list[MmaUse | None] = []
    for key in keys:
        try:
            results.append(MmaUse(**json.loads((cache_dir() / f"{key}.json").read_text())))
        except (OSError, ValueError, TypeError):
            results.append(None)
    todo = [i for i, r in enumerate(results) if r is None]
    if todo:
        job = json.dumps({"cc": target, "units": [asdict(units[i]) for i in todo]})
        env = {**os.environ, **WORKER_ENV, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        try:
            done = subprocess.run([sys.executable, "-m", "iotrace.compiler.mma"], input=job, capture_output=True,
                                  text=True, env=env, timeout=COMPILE_TIMEOUT_S * len(todo))
        except subprocess.TimeoutExpired:
            raise CompileError(f"compiling {len(todo)} unit(s) for sm_{target} took over {COMPILE_TIMEOUT_S} s each",
                               "pick smaller tiles") from None
        if done.returncode != 0:
            lines = [line for line in done.stderr.splitlines() if line.strip()] or ["no output"]
            raise CompileError(f"the Triton compile worker failed: {' '.join(lines[-1].split())}",
                               "run `python -m iotrace.compiler.mma` by hand to see the whole error")
        for i, answer in zip(todo, json.loads(done.stdout.strip().splitlines()[-1]), strict=True):
            if "error" in answer:
                raise CompileError(answer["error"], answer["fix"])
            results[i] = MmaUse(**answer)
            try:  # atomically, as disk_cache.store: a private file, then a rename; a read-only cache costs a recompile
                cache_dir().mkdir(parents=True, exist_ok=True)
                tmp = cache_dir() / f".{keys[i]}.{os.getpid()}.tmp"
                tmp.write_text(json.dumps(answer))
                tmp.replace(cache_dir() / f"{keys[i]}.json")
            except OSError:
                pass
    return [r for r in results if r is not None]


if __name__ == "__main__":
    _worker_main()
