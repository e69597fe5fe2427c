"""The compile worker process, ``python -m iotrace.compiler``: a job as JSON on stdin, one JSON line of answers.

The job is ``{"cc": 86, "units": [TritonUnit fields, ...], "smem_limit": None}`` (a byte count: stop a unit whose
shared memory is over it before PTX); each answer is a :class:`Resources` as a dict, or
``{"error": ..., "fix": ...}`` for a unit that does not compile. :mod:`iotrace.compiler.pool` starts workers with
:data:`iotrace.compiler.triton_target.WORKER_ENV`.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from typing import Any

from iotrace.compiler.errors import CompileError
from iotrace.compiler.triton_target import compile_triton
from iotrace.plugins.spec import TritonUnit

__all__ = ["answer", "worker_main"]


def worker_main() -> None:
    """Read a compile job (JSON on stdin), compile each unit, print one JSON line of answers."""
    print(json.dumps(answer(json.loads(sys.stdin.read()))))


def answer(job: dict[str, Any]) -> list[dict[str, Any]]:
    """The answers to one compile job (also a worker forked by :mod:`iotrace.compiler.forkserver`)."""
    answers = []
    for fields in job["units"]:
        fields["grid"] = tuple(fields["grid"])
        try:
            answers.append(asdict(compile_triton(TritonUnit(**fields), job["cc"], job.get("smem_limit"))))
        except CompileError as exc:
            answers.append({"error": exc.problem, "fix": exc.fix})
    return answers
