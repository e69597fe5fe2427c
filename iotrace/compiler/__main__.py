"""``python -m iotrace.compiler``: the compile worker process (a job as JSON on stdin, answers on stdout), or with
``--serve PATH`` the fork server of :mod:`iotrace.compiler.forkserver`."""

import sys

if sys.argv[1:2] == ["--serve"]:
    from iotrace.compiler.forkserver import serve

    serve(sys.argv[2])
else:
    from iotrace.compiler.worker import worker_main

    worker_main()
