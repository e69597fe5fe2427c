"""A real OpenAI-compatible completions server, small and fast, run as its own process by the ``fake`` engine plugin
(tests/fake_engine.py): what ``iotrace bench serve`` does around a server — start it, wait for it, sweep it, notice it
die, stop it with its children — is tested end to end with it in seconds, the real engines' servers in the slow tests.

``python tests/fake_openai_server.py --port P [--gap S] [--first S] [--die-after N] [--exit-at-start CODE]``: streams
``max_tokens`` content chunks ``--gap`` s apart after ``--first`` s; exits (status 3) once N requests were answered
(a server killed mid-sweep); prints a line and exits at once with CODE (a server that fails to start). It starts a
child process that sleeps, as vLLM's API server starts its engine core, so the test can see that none outlives it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    options: argparse.Namespace
    answered = 0
    lock = threading.Lock()

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._send(200, json.dumps({"object": "list", "data": [{"id": "fake-model", "max_model_len": 512}]})
                       .encode())
        else:
            self._send(404, b'{"detail": "Not Found"}')

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        opts = self.options
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        time.sleep(opts.first)
        n = int(body["max_tokens"])
        for i in range(n):
            if i:
                time.sleep(opts.gap)
            event = {"choices": [{"index": 0, "text": f" w{i}", "finish_reason": "length" if i == n - 1 else None}]}
            self._chunk(b"data: " + json.dumps(event).encode() + b"\n\n")
        prompt = body["prompt"]
        used = len(prompt) if isinstance(prompt, list) else len(prompt.split())
        usage = {"choices": [], "usage": {"prompt_tokens": used, "completion_tokens": n, "total_tokens": used + n}}
        self._chunk(b"data: " + json.dumps(usage).encode() + b"\n\n")
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")
        with Handler.lock:
            Handler.answered += 1
            if opts.die_after and Handler.answered >= opts.die_after:
                print(f"fake server: dying after {Handler.answered} requests", flush=True)
                os._exit(3)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--gap", type=float, default=0.002)
    parser.add_argument("--first", type=float, default=0.005)
    parser.add_argument("--die-after", type=int, default=0)
    parser.add_argument("--exit-at-start", type=int, default=0)
    options, _ = parser.parse_known_args()
    if options.exit_at_start:
        print("fake server: loading the model", flush=True)
        print("fake server: RuntimeError: no memory for the KV cache", file=sys.stderr, flush=True)
        sys.exit(options.exit_at_start)
    # its argv repeats the server's, so a test finds both processes by a tag it passed
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", *sys.argv[1:]])
    print(f"fake server: engine core pid {child.pid}", flush=True)
    Handler.options = options
    server = ThreadingHTTPServer((options.host, options.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
