"""An engine plugin for the tests (``IOTRACE_ENGINE_PLUGINS=tests.fake_engine``): ``fake`` serves through
tests/fake_openai_server.py from this interpreter, so ``iotrace bench serve --engine fake`` runs end to end in
seconds; its ``--server-args`` are the fake server's (``--die-after 3``, ``--exit-at-start 7``, ``--gap 0.01``)."""

from __future__ import annotations

import sys
from pathlib import Path

from iotrace.engines.registry import EngineDef, ServeArgs, hookimpl

SERVER = Path(__file__).resolve().with_name("fake_openai_server.py")


def _argv(args: ServeArgs) -> list[str]:
    return [sys.executable, str(SERVER), "--host", args.host, "--port", str(args.port), *args.extra_args]


@hookimpl
def iotrace_engines() -> list[EngineDef]:
    return [EngineDef(name="fake", summary="a small OpenAI-compatible server for the tests", server_argv=_argv,
                      version_of=lambda python: "fake 1.0")]
