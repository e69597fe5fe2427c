"""``python -m iotrace.compiler``: the compile worker process (a job as JSON on stdin, answers on stdout)."""

from iotrace.compiler import _worker_main

_worker_main()
