"""Compile one CUDA C++ unit with ``nvcc -cubin -Xptxas -v`` and read its resources from ptxas's log."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from iotrace.compiler.errors import CompileError, ToolMissingError
from iotrace.compiler.resources import Resources, parse_ptxas_log
from iotrace.plugins.spec import CudaUnit

__all__ = ["compile_cuda", "nvcc_path", "nvcc_version"]


def nvcc_path() -> str:
    found = shutil.which("nvcc")
    if found is None:
        raise ToolMissingError("nvcc is not installed, so CUDA C++ kernels cannot be compiled for their resources",
                               "install the CUDA toolkit (or pip install nvidia-cuda-nvcc) and put nvcc on PATH")
    return found


@functools.cache
def nvcc_version() -> str:
    """The last line of ``nvcc --version`` (it names the build), for the compile cache's key."""
    done = subprocess.run([nvcc_path(), "--version"], capture_output=True, text=True)
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "unknown"


def compile_cuda(unit: CudaUnit, cc_number: int) -> Resources:
    """Compile ``unit`` for ``sm_<cc_number>`` in a temporary folder and read its entry function's resources."""
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
