"""Stand-in ``nsys``, ``ncu`` and ``nvidia-smi`` executables for testing profiled runs on a machine without them.

Each stand-in is a small Python script written into a directory the test puts first on PATH. It checks the argv it
gets against what iotrace must pass (and exits 97 with the reason when the argv is wrong, so a test fails loudly),
records every call as a JSON line in ``$STANDIN_LOG``, and writes a real export from ``../shared/corpus`` where the
real tool would write its own. ``$STANDIN_MODE`` picks the behaviour:

- ``ok``: nsys copies the RTX 3090 ``.nsys-rep``/``.sqlite`` pair (exports the SQLite with the child's NVTX range
  ``iotrace/<kernel>`` added around the capture's runtime calls, as the real child would have pushed it); ncu copies
  the GTX 1660 SUPER ``--set full`` report. With ``$STANDIN_RUN_CHILD=1`` the child argv is run for real first (under
  the Triton interpreter, standing in for the GPU), so its argv is proven to work.
- ``no-range``: nsys exports the SQLite unchanged (no ``iotrace/<kernel>`` range in it).
- ``no-kernels``: ncu profiles nothing and writes no report, as real ncu does when its filter matches nothing.
- ``counters``: ncu fails with ``ERR_NVGPUCTRPERM``.
- ``child-fails``: the child runs with the interpreter off and no visible GPU, so it fails; its exit status and
  stderr are passed on. ``child-fails-quietly``: the same, but nsys exits 0 and only says so, as Nsight Systems can
  ("The target application returned non-zero exit code 1").
- ``slow``: hangs (in a grandchild process too) until killed.

It holds no tests (its name keeps it among the profiler test files): ``tests/test_profilers.py`` imports
:func:`install`.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

__all__ = ["NCU_REP", "NSYS_REP", "NSYS_SQLITE", "calls", "install"]

NSYS_REP = "nsys/rtx3090_tensorrt_memfusion.nsys-rep"
NSYS_SQLITE = "nsys/rtx3090_tensorrt_memfusion_nsys2023.1.sqlite"  # 36 kernels (PROVENANCE.md)
NCU_REP = "ncu-rep/gtx1660super_dot_product_full_ncu2024.1.ncu-rep"  # 2 kernels, --set full

_COMMON = r'''
import json, os, shutil, subprocess, sys, time

ARGV = sys.argv[1:]
MODE = os.environ.get("STANDIN_MODE", "ok")
CORPUS = os.environ["STANDIN_CORPUS"]


def record(**extra):
    with open(os.environ["STANDIN_LOG"], "a") as fh:
        fh.write(json.dumps({"tool": TOOL, "argv": ARGV, "mode": MODE, **extra}) + "\n")


def die(why):
    record(error=why)
    sys.stderr.write(f"stand-in {TOOL}: {why}: {ARGV}\n")
    sys.exit(97)


def check_child(child):
    if len(child) < 5 or not os.path.isabs(child[0]) or child[1:4] != ["-m", "iotrace", "run"]:
        die("the child is not `<python> -m iotrace run KERNEL ...`")
    for flag in ("--nsys", "--ncu", "--cupti"):
        if flag in child:
            die(f"the child still has the profiler flag {flag}")
    for flag in ("--shape", "--dtype", "--seed", "--backend"):
        if flag not in child:
            die(f"the child lacks {flag}")
    return child[4]


def run_child(child):
    """Run the child argv as the real tool would (the interpreter stands in for the GPU), or fail it on purpose."""
    env = dict(os.environ)
    if MODE.startswith("child-fails"):
        env.update(TRITON_INTERPRET="0", CUDA_VISIBLE_DEVICES="")
    elif os.environ.get("STANDIN_RUN_CHILD") == "1":
        env["TRITON_INTERPRET"] = "1"
    else:
        return
    done = subprocess.run(child, capture_output=True, text=True, env=env)
    record(child_exit=done.returncode)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    if done.returncode != 0 and MODE == "child-fails-quietly":
        print(f"The target application returned non-zero exit code {done.returncode}")
    elif done.returncode != 0:
        sys.exit(done.returncode)


def hang():
    record(hanging=True)
    subprocess.run([sys.executable, "-c", "import time; time.sleep(120)"])
    time.sleep(120)
'''

_NSYS = r'''
TOOL = "nsys"
PROFILE_OPTIONS = ["--trace=cuda,nvtx", "--sample=none", "--cpuctxsw=none", "--cuda-graph-trace=node"]


def add_range(sqlite, name):
    """Push `name` in the NVTX domain `iotrace` on the launching thread around every runtime call of the capture."""
    import sqlite3
    db = sqlite3.connect(sqlite)
    tid, start, end = db.execute(
        "SELECT globalTid, MIN(start), MAX(end) FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY globalTid").fetchone()
    domain = db.execute("SELECT COALESCE(MAX(domainId), 0) + 1 FROM NVTX_EVENTS").fetchone()[0]
    db.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
               "VALUES (?, NULL, 75, 'iotrace', ?, ?)", (start - 2, tid, domain))  # 75: domain create
    db.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
               "VALUES (?, ?, 59, ?, ?, ?)", (start - 1, end + 1, name, tid, domain))  # 59: push/pop range
    db.commit()
    db.close()


if ARGV == ["--version"]:
    record()
    print("NVIDIA Nsight Systems version 2024.5.1.113-245134619542v0")
elif ARGV[:1] == ["profile"]:
    options, child = ARGV[1:7], ARGV[7:]
    if options[:4] != PROFILE_OPTIONS or not options[4].startswith("--output=") \
            or options[5] != "--force-overwrite=true":
        die("unexpected nsys profile options")
    kernel = check_child(child)
    record(kernel=kernel)
    if MODE == "slow":
        hang()
    run_child(child)
    shutil.copyfile(os.path.join(CORPUS, NSYS_REP), options[4].split("=", 1)[1] + ".nsys-rep")
elif ARGV[:1] == ["export"]:
    if len(ARGV) != 5 or ARGV[1] != "--type=sqlite" or not ARGV[2].startswith("--output=") \
            or ARGV[3] != "--force-overwrite=true" or not ARGV[4].endswith(".nsys-rep") \
            or not os.path.isfile(ARGV[4]):
        die("unexpected nsys export argv")
    out = ARGV[2].split("=", 1)[1]
    shutil.copyfile(os.path.join(CORPUS, NSYS_SQLITE), out)
    os.chmod(out, 0o644)  # the corpus is read-only; the copy must not be
    kernel = [json.loads(line) for line in open(os.environ["STANDIN_LOG"]) if '"kernel"' in line][-1]["kernel"]
    if MODE != "no-range":
        add_range(out, "iotrace/" + kernel)
    record(kernel=kernel)
else:
    die("unexpected nsys command")
'''

_NCU = r'''
TOOL = "ncu"

if ARGV == ["--version"]:
    record()
    print("NVIDIA (R) Nsight Compute Command Line Profiler")
    print("Copyright (c) 2018-2024 NVIDIA Corporation")
    print("Version 2024.1.1.0 (build 33998838) (public-release)")
    sys.exit(0)
names = ["--set", None, "--nvtx", "--nvtx-include", None, "--clock-control", None, "--launch-count", None,
         "--target-processes", "all", "--export", None, "--force-overwrite"]
options, child = ARGV[:len(names)], ARGV[len(names):]
if len(options) != len(names) or any(want is not None and got != want for want, got in zip(names, options)):
    die("unexpected ncu options")
kernel = check_child(child)
if options[4] != "iotrace@iotrace\\/" + kernel + "/":
    die(f"NVTX filter {options[4]!r} is not the push/pop range iotrace/{kernel} in domain iotrace")
if options[6] not in ("base", "none") or not options[8].isdigit():
    die("bad --clock-control or --launch-count")
record(kernel=kernel)
if MODE == "slow":
    hang()
if MODE == "counters":
    sys.stderr.write("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
                     "Performance Counters on the target device 0. For instructions on enabling permissions and to "
                     "get more information see https://developer.nvidia.com/ERR_NVGPUCTRPERM\n")
    sys.exit(1)
run_child(child)
if MODE == "no-kernels":
    print("==PROF== Disconnected from process 4242")
    print("==WARNING== No kernels were profiled.")
    sys.exit(0)
shutil.copyfile(os.path.join(CORPUS, NCU_REP), options[12] + ".ncu-rep")
'''

_SMI = r'''
import sys
if "--query-gpu=name,driver_version,compute_cap,memory.total" in sys.argv:
    print("NVIDIA GeForce RTX 3090, 550.54.15, 8.6, 24576 MiB")
else:
    sys.exit(f"stand-in nvidia-smi: unexpected argv {sys.argv[1:]}")
'''


def _write(path: Path, body: str) -> None:
    path.write_text(f"#!{sys.executable}\n" + body, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def install(bin_dir: Path, corpus: Path) -> dict[str, str]:
    """Write the stand-ins into ``bin_dir``; returns the environment a CLI run needs to find and drive them."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    constants = f"NSYS_REP = {NSYS_REP!r}\nNSYS_SQLITE = {NSYS_SQLITE!r}\nNCU_REP = {NCU_REP!r}\n"
    _write(bin_dir / "nsys", _COMMON + constants + _NSYS)
    _write(bin_dir / "ncu", _COMMON + constants + _NCU)
    _write(bin_dir / "nvidia-smi", _SMI)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "STANDIN_CORPUS": str(corpus),
            "STANDIN_LOG": str(bin_dir / "calls.jsonl"), "CUDA_HOME": str(bin_dir / "no-cuda")}


def calls(bin_dir: Path) -> list[dict]:
    """Every call the stand-ins recorded, in order."""
    log = bin_dir / "calls.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
