"""Compile one Triton unit for a CUDA target on the CPU and read its resources.

``triton.compile(ASTSource, GPUTarget("cuda", cc, 32))`` needs no GPU; ptxas's ``-v`` log (printed because the
worker sets ``TRITON_DUMP_PTXAS_LOG=1``) gives registers, spills and barriers, and the compiled metadata gives
the dynamic shared memory. Runs only inside a compile worker (:mod:`iotrace.compiler.worker`): Triton decides
interpreter-or-compiler when a kernel module is imported, so the interpreter must be off from the start.
"""

from __future__ import annotations

import contextlib
import importlib
import io
from typing import Any

from iotrace.compiler.errors import CompileError
from iotrace.compiler.resources import Resources, parse_ptxas_log
from iotrace.plugins.spec import TritonUnit

__all__ = ["STOPPED", "WORKER_ENV", "SharedMemoryOver", "compile_triton", "compile_unit"]

#: How a :class:`Resources` compiled only as far as its shared memory says so, at the end of its ``compiler``.
STOPPED = "(stopped before PTX: shared memory over the block limit)"

#: The environment of a compile worker: real @triton.jit functions, and a recompile every time so ptxas
#: prints its log (Triton's own cache would skip ptxas).
WORKER_ENV = {"TRITON_INTERPRET": "0", "TRITON_ALWAYS_COMPILE": "1", "TRITON_DUMP_PTXAS_LOG": "1",
              "TRITON_DEFAULT_FP_FUSION": "1"}


class SharedMemoryOver(Exception):
    """Raised inside Triton's pipeline when a unit's shared memory, known once its LLVM IR is made, is over a limit:
    the compile stops there, before PTX and ptxas (the slow half for a large tile that spills)."""

    def __init__(self, shared: int) -> None:
        super().__init__(shared)
        self.shared = shared


@contextlib.contextmanager
def _stop_over_shared_memory(limit: int | None) -> Any:
    """While compiling: stop after Triton's ``llir`` stage when ``metadata["shared"]`` exceeds ``limit`` bytes.

    Triton sets ``shared`` (the block's dynamic shared memory, its final allocation) in that stage; the stages after
    it (PTX, then ptxas) only lower the same kernel. Done through Triton's documented pipeline hook,
    ``triton.knobs.runtime.add_stages_inspection_hook`` (triton/knobs.py; called with no arguments for a cache-key
    suffix, then by the backend's ``add_stages`` with the stages to edit), restored afterwards.
    """
    if limit is None:
        yield
        return
    from triton import knobs

    def hook(*args: Any) -> Any:
        if not args:  # triton.compiler.compile asks for a cache-key suffix and a hash
            return f"iotrace-stop-over-shared-{limit}", ""
        _backend, stages, *_ = args
        lower = stages.get("llir")
        if lower is not None:
            def llir(src: Any, metadata: dict[str, Any]) -> Any:
                module = lower(src, metadata)
                if int(metadata.get("shared") or 0) > limit:
                    raise SharedMemoryOver(int(metadata["shared"]))
                return module

            stages["llir"] = llir
        return None

    before = knobs.runtime.add_stages_inspection_hook
    knobs.runtime.add_stages_inspection_hook = hook
    try:
        yield
    finally:
        knobs.runtime.add_stages_inspection_hook = before


def compile_unit(unit: TritonUnit, cc_number: int, smem_limit: int | None = None) -> tuple[Any, str]:
    """Triton's compiled kernel of ``unit`` for ``sm_<cc_number>`` (its ``asm`` holds the PTX, and the SASS where
    Triton's bundled nvdisasm is present), and ptxas's log. In a worker process only, like :func:`compile_triton`.

    :raises SharedMemoryOver: ``smem_limit`` given and the unit's shared memory is over it (the compile stopped
        before PTX).
    """
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
        with contextlib.redirect_stdout(log), _stop_over_shared_memory(smem_limit):
            compiled = triton.compile(source, target=GPUTarget("cuda", cc_number, 32),
                                      options={"num_warps": unit.num_warps, "num_stages": unit.num_stages})
    except SharedMemoryOver:
        raise
    except Exception as exc:  # the compiler's own failure: its last line is the cause, on one line
        raise CompileError(f"{unit.function} does not compile for sm_{cc_number}: {_last_line(exc)}",
                           "try a smaller tile or fewer stages") from None
    return compiled, log.getvalue()


def compile_triton(unit: TritonUnit, cc_number: int, smem_limit: int | None = None) -> Resources:
    """Compile one Triton unit for ``sm_<cc_number>`` (in a worker process started with :data:`WORKER_ENV`).

    ``smem_limit``: the most shared memory a block may have; a unit over it is not compiled past its LLVM IR, and its
    Resources hold that shared memory and nothing from ptxas (0 registers, no spills; ``compiler`` says so): enough
    to refuse it (it cannot launch), never to be cached.
    """
    import triton

    try:
        compiled, log = compile_unit(unit, cc_number, smem_limit)
    except SharedMemoryOver as over:
        return Resources(target=f"sm_{cc_number}", kernel=unit.function, registers=0, static_smem=0,
                         dynamic_smem=over.shared, spill_stores=0, spill_loads=0, stack_bytes=0, barriers=0,
                         threads_per_block=unit.threads_per_block, grid=unit.grid,
                         compiler=f"triton {triton.__version__} {STOPPED}")
    parsed = parse_ptxas_log(log)
    return Resources(target=f"sm_{cc_number}", kernel=unit.function, registers=parsed["registers"],
                     static_smem=parsed["static_smem"], dynamic_smem=int(compiled.metadata.shared),
                     spill_stores=parsed["spill_stores"], spill_loads=parsed["spill_loads"],
                     stack_bytes=parsed["stack_bytes"], barriers=parsed["barriers"],
                     threads_per_block=unit.threads_per_block, grid=unit.grid, compiler=f"triton {triton.__version__}")


def _last_line(exc: BaseException) -> str:
    text = getattr(exc, "error_message", None) or str(exc)
    lines = [" ".join(line.split()) for line in str(text).splitlines() if line.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:300]
