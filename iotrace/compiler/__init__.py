"""Compile a kernel config for a card's target on the CPU and read its static resources.

Triton kernels are compiled with ``triton.compile(ASTSource, GPUTarget("cuda", cc, 32))`` — no GPU needed —
and ptxas's ``-v`` log gives registers, spills and barriers; the compiled metadata gives dynamic shared
memory (../shared/reference/env-probe.md, section 6b). CUDA C++ kernels go through ``nvcc -cubin
--resource-usage``. Resources feed ``iotrace.occupancy`` unchanged, so a Triton kernel and a CUDA kernel
are judged by the same rules.

Triton decides interpreter-or-compiler when a kernel module is imported, so Triton units compile in worker
processes (``python -m iotrace.compiler``) started fresh with the interpreter off, several at once. Plain
subprocesses rather than multiprocessing: a user's script needs no ``__main__`` guard. Results are cached on disk by
(kernel source, launch, target, compiler version) under ``$IOTRACE_CACHE_DIR`` (default ``$XDG_CACHE_HOME/iotrace``,
that is ``~/.cache/iotrace``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import hashlib
import importlib
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from iotrace.errors import IotraceError
from iotrace.plugins.spec import CudaUnit, TritonUnit
from iotrace.sm_limits import parse_cc

__all__ = ["CompileBatch", "CompileError", "Resources", "ToolMissingError", "cache_dir", "compile_each",
           "compile_resources", "iotrace_cache_root", "parse_ptxas_log"]


class CompileError(IotraceError):
    """A kernel config that does not compile for a target (the compiler's message is kept)."""


class ToolMissingError(IotraceError):
    """A compiler iotrace needs (nvcc) is not installed."""


@dataclass(frozen=True)
class Resources:
    """What one compiled kernel asks of an SM, per the compiler for one target."""

    target: str
    kernel: str
    registers: int
    static_smem: int
    dynamic_smem: int
    spill_stores: int
    spill_loads: int
    stack_bytes: int
    barriers: int
    threads_per_block: int
    grid: tuple[int, int, int]
    compiler: str

    @property
    def shared_mem_bytes(self) -> int:
        return self.static_smem + self.dynamic_smem

    @property
    def spills(self) -> int:
        """Bytes spilled to local memory per thread (stores + loads), as ptxas reports them."""
        return self.spill_stores + self.spill_loads

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(shared_mem_bytes=self.shared_mem_bytes, spills=self.spills)
        return out


_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas_log(log: str) -> dict[str, int]:
    """Registers, barriers, static shared memory, stack and spills from ``ptxas -v`` output (its last function)."""
    used = _USED.findall(log)
    if not used:
        raise CompileError(f"no 'Used N registers' line in the ptxas log: {log.strip()[:200]!r}",
                           "check that ptxas ran with -v")
    regs, barriers = used[-1]
    spill = _SPILL.findall(log)
    stack, stores, loads = (int(v) for v in spill[-1]) if spill else (0, 0, 0)
    smem = _SMEM.findall(log)
    return {"registers": int(regs), "barriers": int(barriers or 0), "static_smem": int(smem[-1]) if smem else 0,
            "stack_bytes": stack, "spill_stores": stores, "spill_loads": loads}


def iotrace_cache_root() -> Path:
    """``$IOTRACE_CACHE_DIR``, else ``$XDG_CACHE_HOME/iotrace`` (XDG Base Directory spec: ``~/.cache`` when unset)."""
    if os.environ.get("IOTRACE_CACHE_DIR"):
        return Path(os.environ["IOTRACE_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "iotrace"


def cache_dir() -> Path:
    return iotrace_cache_root() / "compile"


def _cc_number(cc: str | tuple[int, int]) -> int:
    major, minor = parse_cc(cc)
    return major * 10 + minor


# --- Triton --------------------------------------------------------------------------------------------------


#: The environment of a compile worker: real @triton.jit functions, and a recompile every time so ptxas
#: prints its log (Triton's own cache would skip ptxas).
#: A compile that takes longer than this (a 1024x1024 tile, say) is abandoned as a config error.
COMPILE_TIMEOUT_S = 180

_WORKER_ENV = {"TRITON_INTERPRET": "0", "TRITON_ALWAYS_COMPILE": "1", "TRITON_DUMP_PTXAS_LOG": "1",
               "TRITON_DEFAULT_FP_FUSION": "1"}


def _compile_triton(unit: TritonUnit, cc_number: int) -> Resources:
    """Compile one Triton unit for ``sm_<cc_number>`` (runs inside a worker process, see :func:`_worker_main`)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = getattr(importlib.import_module(unit.module), unit.function)
    signature: dict[str, str] = {}
    constexprs: dict[Any, Any] = {}
    attrs: dict[tuple[int, ...], list[list[Any]]] = {}
    names = list(fn.arg_names)
    for name in names:
        if name in unit.constexprs:
            signature[name], constexprs[(names.index(name),)] = "constexpr", unit.constexprs[name]
            continue
        value = unit.args[name]
        index = (names.index(name),)
        if isinstance(value, str) and value.startswith("*"):  # a pointer: torch allocations are 256-byte aligned
            signature[name], attrs[index] = value, [["tt.divisibility", 16]]
        elif isinstance(value, str):  # a float scalar, given by its type
            signature[name] = value
        elif value == 1:  # Triton specialises an integer argument equal to 1 into a constant
            signature[name], constexprs[index] = "constexpr", 1
        else:
            signature[name] = "i32" if -(2**31) <= value < 2**31 else "i64"
            if value % 16 == 0:
                attrs[index] = [["tt.divisibility", 16]]
    source = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log):
            compiled = triton.compile(source, target=GPUTarget("cuda", cc_number, 32),
                                      options={"num_warps": unit.num_warps, "num_stages": unit.num_stages})
    except Exception as exc:  # the compiler's own failure: its last line is the cause, on one line
        raise CompileError(f"{unit.function} does not compile for sm_{cc_number}: {_last_line(exc)}",
                           "try a smaller tile or fewer stages") from None
    parsed = parse_ptxas_log(log.getvalue())
    return Resources(target=f"sm_{cc_number}", kernel=unit.function, registers=parsed["registers"],
                     static_smem=parsed["static_smem"], dynamic_smem=int(compiled.metadata.shared),
                     spill_stores=parsed["spill_stores"], spill_loads=parsed["spill_loads"],
                     stack_bytes=parsed["stack_bytes"], barriers=parsed["barriers"],
                     threads_per_block=unit.threads_per_block, grid=unit.grid, compiler=f"triton {triton.__version__}")


def _last_line(exc: BaseException) -> str:
    text = getattr(exc, "error_message", None) or str(exc)
    lines = [" ".join(line.split()) for line in str(text).splitlines() if line.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:300]


# --- CUDA C++ ------------------------------------------------------------------------------------------------


def nvcc_path() -> str:
    found = shutil.which("nvcc")
    if found is None:
        raise ToolMissingError("nvcc is not installed, so CUDA C++ kernels cannot be compiled for their resources",
                               "install the CUDA toolkit (or pip install nvidia-cuda-nvcc) and put nvcc on PATH")
    return found


def _compile_cuda(unit: CudaUnit, cc_number: int) -> Resources:
    nvcc = nvcc_path()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "kernel.cu"
        src.write_text(unit.source, encoding="utf-8")
        cmd = [nvcc, f"-arch=sm_{cc_number}", "-cubin", "-Xptxas", "-v", *unit.options, "-o",
               str(Path(tmp) / "kernel.cubin"), str(src)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise CompileError(f"nvcc failed for {unit.kernel} on sm_{cc_number}: {done.stderr.strip()[-300:]}",
                               "check the kernel source")
    log = done.stderr + done.stdout
    # ptxas prints one block per entry function; keep this kernel's (its extern "C" name).
    blocks = {b.split("'")[1]: b for b in log.split("Compiling entry function ")[1:] if "'" in b}
    if unit.kernel not in blocks:
        raise CompileError(f"nvcc compiled no entry function {unit.kernel!r} (found {', '.join(blocks) or 'none'})",
                           'declare the kernel extern "C" __global__')
    parsed = parse_ptxas_log(blocks[unit.kernel])
    version = re.search(r"release (\d+\.\d+)", subprocess.run([nvcc, "--version"], capture_output=True,
                                                               text=True).stdout)
    return Resources(target=f"sm_{cc_number}", kernel=unit.kernel, registers=parsed["registers"],
                     static_smem=parsed["static_smem"], dynamic_smem=unit.dynamic_smem,
                     spill_stores=parsed["spill_stores"], spill_loads=parsed["spill_loads"],
                     stack_bytes=parsed["stack_bytes"], barriers=parsed["barriers"],
                     threads_per_block=unit.threads_per_block, grid=unit.grid,
                     compiler=f"nvcc {version.group(1) if version else 'unknown'}")


# --- cache and fan-out ---------------------------------------------------------------------------------------


#: Bumped when what a cache entry holds or how it is parsed changes.
CACHE_SCHEMA = "3"


@functools.cache
def _nvcc_version() -> str:
    done = subprocess.run([nvcc_path(), "--version"], capture_output=True, text=True)
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "unknown"


def _compiler_version(unit: TritonUnit | CudaUnit) -> str:
    if isinstance(unit, CudaUnit):
        return "nvcc:" + _nvcc_version()
    from importlib.metadata import version

    return "triton:" + version("triton") + ":" + os.environ.get("TRITON_PTXAS_PATH", "")


def package_source(module: str) -> bytes:
    # The kernel's module and its siblings: @triton.jit helpers are often shared within a package
    # (iotrace/kernels/attention_common.py), and a change to one must recompile every kernel that calls it.
    spec = importlib.util.find_spec(module)
    origin = Path(spec.origin) if spec and spec.origin else None
    return b"".join(p.read_bytes() for p in sorted(origin.parent.glob("*.py"))) if origin else b""


def _cache_key(unit: TritonUnit | CudaUnit, cc_number: int, sources: dict[str, bytes] | None = None) -> str:
    if isinstance(unit, TritonUnit):
        sources = {} if sources is None else sources
        if unit.module not in sources:
            sources[unit.module] = package_source(unit.module)
        source = sources[unit.module]
        fields = json.dumps(asdict(unit), sort_keys=True, default=str).encode()
    else:
        source, fields = unit.source.encode(), json.dumps(asdict(unit), sort_keys=True, default=str).encode()
    digest = hashlib.sha256(source + fields + _compiler_version(unit).encode() + str(cc_number).encode()
                            + CACHE_SCHEMA.encode())
    return digest.hexdigest()[:32]


def _load_cached(key: str) -> Resources | None:
    path = cache_dir() / f"{key}.json"
    try:
        data = json.loads(path.read_text())
        data["grid"] = tuple(data["grid"])
        return Resources(**data)
    except (OSError, ValueError, TypeError, KeyError):
        return None  # absent or unreadable: compile again


def _store(key: str, resources: Resources) -> None:
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
        tmp = cache_dir() / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp"  # two writers never share one
        tmp.write_text(json.dumps(asdict(resources)))
        tmp.replace(cache_dir() / f"{key}.json")
    except OSError:
        pass  # a read-only home only costs a recompile next time


def compile_resources(units: list[TritonUnit | CudaUnit], cc: str | tuple[int, int],
                      jobs: int | None = None) -> list[Resources]:
    """Static resources of every unit compiled for ``cc``, from the cache or compiled (in parallel for Triton).

    The first unit that does not compile raises its :class:`CompileError`.
    """
    batch = compile_each(units, cc, jobs)
    for result in batch.results:
        if isinstance(result, CompileError):
            raise result
    return batch.results  # type: ignore[return-value]


@dataclass(frozen=True)
class CompileBatch:
    """The outcome of :func:`compile_each`: one answer per unit, and how many came from the cache."""

    results: list[Resources | CompileError]
    cached: int
    compiled: int
    workers_started: int


#: Units one worker process compiles before reporting back: a worker pays about 2 s to import torch and Triton
#: (env-probe.md, "Import times"), a config 0.2-2.5 s to compile (section 6b), so a few per worker keeps the start-up
#: cost small while the progress bar still moves.
UNITS_PER_WORKER = 8


def compile_each(units: list[TritonUnit | CudaUnit], cc: str | tuple[int, int], jobs: int | None = None,
                 progress: Callable[[int], None] | None = None) -> CompileBatch:
    """Like :func:`compile_resources`, but a unit that does not compile gives its :class:`CompileError` in its place
    instead of stopping the rest (the autotuner prunes such configs). ``progress(n)`` is called as units finish."""
    cc_number = _cc_number(cc)
    results: list[Resources | CompileError | None] = [None] * len(units)
    todo: list[tuple[int, str]] = []
    sources: dict[str, bytes] = {}  # one read of each kernel package per call, however many units share it
    for i, unit in enumerate(units):
        key = _cache_key(unit, cc_number, sources)
        results[i] = _load_cached(key)
        if results[i] is None:
            todo.append((i, key))
    cached = len(units) - len(todo)
    if progress is not None and cached:
        progress(cached)
    triton_todo = [(i, key) for i, key in todo if isinstance(units[i], TritonUnit)]
    for i, key in todo:
        if isinstance(units[i], CudaUnit):
            try:
                results[i] = _compile_cuda(units[i], cc_number)  # type: ignore[arg-type]
                _store(key, results[i])  # type: ignore[arg-type]
            except CompileError as exc:
                results[i] = exc
            if progress is not None:
                progress(1)
    batches: list[list[tuple[int, str]]] = []

    def _alone(unit: TritonUnit, cc: int) -> dict[str, Any]:
        try:
            return _run_worker([unit], cc)[0]
        except CompileError as exc:
            return {"error": exc.problem, "fix": exc.fix}

    if triton_todo:
        workers = max(1, min(jobs or os.cpu_count() or 1, len(triton_todo)))
        size = max(1, min(UNITS_PER_WORKER, -(-len(triton_todo) // workers)))
        batches = [triton_todo[start:start + size] for start in range(0, len(triton_todo), size)]

        def work(batch: list[tuple[int, str]]) -> None:
            try:
                answers = _run_worker([units[i] for i, _ in batch], cc_number)  # type: ignore[misc]
            except CompileError as exc:  # the worker died or timed out: one unit did it, so ask each on its own
                if len(batch) == 1:
                    answers = [{"error": exc.problem, "fix": exc.fix}]
                else:
                    answers = [_alone(units[i], cc_number) for i, _ in batch]  # type: ignore[arg-type]
            for (i, key), answer in zip(batch, answers, strict=True):
                if "error" in answer:
                    results[i] = CompileError(answer["error"], answer["fix"])
                else:
                    answer["grid"] = tuple(answer["grid"])
                    results[i] = Resources(**answer)
                    _store(key, results[i])  # type: ignore[arg-type]
            if progress is not None:
                progress(len(batch))

        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            for done in concurrent.futures.as_completed([pool.submit(work, b) for b in batches]):
                done.result()
    return CompileBatch([r for r in results if r is not None], cached, len(todo), len(batches))


def _run_worker(units: list[TritonUnit], cc_number: int) -> list[dict[str, Any]]:
    job = json.dumps({"cc": cc_number, "units": [asdict(u) for u in units]})
    # The worker sees this process's sys.path, so a plugin module found only through it imports there too.
    env = {**os.environ, **_WORKER_ENV, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        done = subprocess.run([sys.executable, "-m", "iotrace.compiler"], input=job, capture_output=True,
                              text=True, env=env, timeout=COMPILE_TIMEOUT_S * len(units))
    except subprocess.TimeoutExpired:
        raise CompileError(f"compiling {', '.join(u.function for u in units)} for sm_{cc_number} took over "
                           f"{COMPILE_TIMEOUT_S} s per kernel", "the config is likely far too large: pick smaller "
                           "tiles") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise CompileError(f"the Triton compile worker failed: {' '.join((lines or ['no output'])[-1].split())}",
                           "run `python -m iotrace.compiler` by hand to see the whole error")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _worker_main() -> None:
    """Read a compile job (JSON on stdin), compile each unit, print one JSON line of answers."""
    job = json.loads(sys.stdin.read())
    answers = []
    for fields in job["units"]:
        fields["grid"] = tuple(fields["grid"])
        try:
            answers.append(asdict(_compile_triton(TritonUnit(**fields), job["cc"])))
        except CompileError as exc:
            answers.append({"error": exc.problem, "fix": exc.fix})
    print(json.dumps(answers))

