"""The tokenizer of a GGUF, built from the file's own vocabulary by ``transformers``' GGUF support.

A GGUF carries its tokenizer (``tokenizer.ggml.model``, ``.tokens``, ``.merges``, ``.pre``); ``transformers``
converts it into a ``tokenizers`` fast tokenizer (``integrations/ggml.py``), the same one its ``LlamaForCausalLM``
check in the tests loads, so the token ids agree by construction. Offline: nothing is downloaded.

Building it re-parses the whole GGUF and converts the vocabulary (seconds); the result is saved once under
``<iotrace cache root>/tokenizers/<key>/``, keyed by the file's identity and the converter's version, and loaded
from there (a fraction of a second) on later runs.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from iotrace.model.gguf_file import MODEL_INSTALL, MissingModelDependencyError

__all__ = ["gguf_tokenizer", "tokenizer_cache_dir"]

#: Bumped when what a cached tokenizer holds or how it is saved changes.
_SCHEMA = "1"


def gguf_tokenizer(path: Path) -> Any:
    """A ``transformers`` fast tokenizer from the GGUF at ``path`` (one object per file and process; not to be
    mutated by callers)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local file: never ask the Hub
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise MissingModelDependencyError("text prompts need the Python package 'transformers', which is not "
                                          "installed", f"{MODEL_INSTALL}; or pass --prompt-tokens N") from None
    path = Path(path)
    try:
        resolved = path.resolve()
        stat = resolved.stat()
    except OSError:
        return _from_gguf(path)  # no file: transformers says so, as before
    return _memoised(resolved, stat.st_size, stat.st_mtime_ns)


def tokenizer_cache_dir(resolved: Path, size: int, mtime_ns: int) -> Path:
    """Where the tokenizer of the GGUF with this identity is cached (a change to the file or to ``transformers``
    or ``tokenizers`` gives a new key, so an entry is never stale)."""
    from iotrace.compiler.disk_cache import iotrace_cache_root

    versions = [importlib.metadata.version(name) for name in ("transformers", "tokenizers")]
    identity = "\0".join([_SCHEMA, str(resolved), str(size), str(mtime_ns), *versions])
    return iotrace_cache_root() / "tokenizers" / hashlib.sha256(identity.encode()).hexdigest()[:32]


# Building from the GGUF takes seconds per run (re-parse + vocab conversion); the saved copy loads in ~0.3 s.
@functools.lru_cache(maxsize=4)
def _memoised(resolved: Path, size: int, mtime_ns: int) -> Any:
    from transformers import AutoTokenizer

    entry = tokenizer_cache_dir(resolved, size, mtime_ns)
    if (entry / "tokenizer.json").is_file():
        try:
            return AutoTokenizer.from_pretrained(str(entry))
        except Exception:  # a damaged entry is no error: it is removed and built again from the GGUF
            shutil.rmtree(entry, ignore_errors=True)
    tokenizer = _from_gguf(resolved)
    _store(tokenizer, entry)
    return tokenizer


def _from_gguf(path: Path) -> Any:
    from transformers import AutoTokenizer

    from iotrace.model.gguf_file import fast_gguf_package

    with fast_gguf_package():  # transformers reads the GGUF twice through the gguf package: 10.0 s -> 3.9 s
        return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def _store(tokenizer: Any, entry: Path) -> None:
    """Save ``tokenizer`` as ``entry`` atomically: into a private directory beside it, then renamed. A read-only
    cache, or another process that stored it first, leaves the entry as it is."""
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{entry.name}-", dir=entry.parent))
    except OSError:
        return
    try:
        tokenizer.save_pretrained(str(staging))
        os.replace(staging, entry)  # fails (ENOTEMPTY) when another process stored it first: theirs stays
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
