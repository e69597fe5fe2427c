"""The engine runner: one engine, one request, in the engine's own interpreter.

``PYTHON main.py < request.json`` reads an ``iotrace.engine-request/1`` object on stdin, runs it with the named
engine and writes one ``iotrace.engine-result/1`` object as the last line of stdout. It needs nothing of iotrace
(only the engine's own packages), so it runs in a venv holding a pinned vLLM or llama-cpp-python build; iotrace's
process never imports an engine. Whatever an engine prints goes to stderr: file descriptor 1 is pointed at 2 before
the engine is imported, and the result is written to a private copy of the original stdout.

A failure is still one result: ``{"error": ..., "stage": "import" | "load" | "run"}`` with exit status 1. A crash
that kills the interpreter (a segfault in native code) leaves no result; the caller reports the signal.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import platform
import sys
import time
import traceback

SCHEMA_IN = "iotrace.engine-request/1"
SCHEMA_OUT = "iotrace.engine-result/1"
#: engine name -> the module of this folder that runs it
MODULES = {"transformers": "engine_transformers", "llama.cpp": "engine_llama_cpp", "vllm": "engine_vllm",
           "iotrace": "engine_iotrace"}


class EngineFailure(Exception):
    """A failure an engine module names (what went wrong and at which stage), reported as the result's error."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage


def environment() -> dict:
    """The interpreter and a hash of its installed distributions (what ``pip freeze`` lists, without needing pip)."""
    from importlib import metadata

    dists = sorted({f"{(d.metadata['Name'] or '?').lower()}=={d.version}" for d in metadata.distributions()})
    return {"python": sys.executable, "python_version": platform.python_version(),
            "freeze_sha256": hashlib.sha256("\n".join(dists).encode()).hexdigest(), "distributions": len(dists),
            "machine": platform.machine(), "cpu_count": os.cpu_count()}


def main() -> int:
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # an engine's prints and C-level writes to stdout land on stderr
    sys.stdout = sys.stderr
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    started = time.perf_counter()
    result: dict = {"schema": SCHEMA_OUT}
    status = 0
    try:
        request = json.loads(sys.stdin.read())
        if request.get("schema") != SCHEMA_IN:
            raise EngineFailure("request", f"not an {SCHEMA_IN} request: {str(request)[:80]}")
        name = request["engine"]
        result["engine"] = name
        if name not in MODULES:
            raise EngineFailure("request", f"unknown engine {name!r}; known: {', '.join(MODULES)}")
        result["environment"] = environment()
        module = importlib.import_module(MODULES[name])
        result.update(module.run(request, EngineFailure))
    except EngineFailure as exc:
        result.update(error=str(exc), stage=exc.stage)
        status = 1
    except Exception as exc:  # any other failure is the engine's: reported with its last frame, never lost
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        result.update(error=f"{type(exc).__name__}: {exc} ({os.path.basename(frame.filename)}:{frame.lineno})",
                      stage="run")
        status = 1
    result["runner_s"] = time.perf_counter() - started
    out.write(json.dumps(result) + "\n")
    out.flush()
    return status


if __name__ == "__main__":  # vLLM starts workers with spawn: the request is read only in the parent
    sys.exit(main())
