"""``python -m iotrace.compiler``: the compile worker process (a job as JSON on stdin, answers on stdout)."""

from iotrace.compiler.worker import worker_main

worker_main()
