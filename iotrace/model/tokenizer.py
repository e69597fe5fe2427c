"""The tokenizer of a GGUF, built from the file's own vocabulary by ``transformers``' GGUF support.

A GGUF carries its tokenizer (``tokenizer.ggml.model``, ``.tokens``, ``.merges``, ``.pre``); ``transformers``
converts it into a ``tokenizers`` fast tokenizer (``integrations/ggml.py``), the same one its ``LlamaForCausalLM``
check in the tests loads, so the token ids agree by construction. Offline: nothing is downloaded.

Building it re-parses the whole GGUF and converts the vocabulary (seconds); the result is saved once under
``<iotrace cache root>/tokenizers/<key>/``, keyed by the file's identity and the converter's version, and loaded
from there on later runs: its ``tokenizer.json`` straight into the ``tokenizers`` library, which encodes and decodes
as ``transformers``' fast tokenizer does (a thin wrapper, :class:`CachedTokenizer`); ``transformers`` itself is
imported and its tokenizer loaded only when something else of it is asked for.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from iotrace.model.gguf_file import MODEL_INSTALL, MissingModelDependencyError

__all__ = ["CachedTokenizer", "gguf_tokenizer", "tokenizer_cache_dir"]

#: Bumped when what a cached tokenizer holds or how it is saved changes.
_SCHEMA = "1"


def gguf_tokenizer(path: Path) -> Any:
    """A ``transformers`` fast tokenizer from the GGUF at ``path`` (one object per file and process; not to be
    mutated by callers)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local file: never ask the Hub
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if importlib.util.find_spec("transformers") is None:  # found, not imported: a cached tokenizer does without it
        raise MissingModelDependencyError("text prompts need the Python package 'transformers', which is not "
                                          "installed", f"{MODEL_INSTALL}; or pass --prompt-tokens N")
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


class CachedTokenizer:
    """A cached entry's tokenizer: ``encode`` and ``decode`` straight through the ``tokenizers`` library (what
    ``transformers``' fast tokenizer calls for them), everything else (``__call__``, special-token ids,
    ``save_pretrained``, ...) from ``transformers``' own tokenizer of the same entry, loaded on first use.

    Loading the entry this way takes ~0.1 s and imports no ``transformers`` (2 s of imports, and 0.3-0.7 s for
    ``AutoTokenizer.from_pretrained`` of the entry, in every process that only tokenizes: ``bench``, ``quant``,
    ``tour``). Only an entry whose settings these two calls honour as ``transformers`` does is read this way
    (:meth:`open`); tests/test_model_load_cache.py holds both to ``transformers``' tokenizer built from the GGUF."""

    def __init__(self, entry: Path, backend: Any) -> None:
        self._entry, self._backend, self._full = entry, backend, None

    @classmethod
    def open(cls, entry: Path) -> CachedTokenizer | None:
        """The entry's tokenizer, or None where its config asks for what only ``transformers`` does (splitting
        special tokens, cleaning up spaces): then the caller loads ``transformers``' own."""
        from tokenizers import Tokenizer

        config = json.loads((entry / "tokenizer_config.json").read_text(encoding="utf-8"))
        if config.get("split_special_tokens") or config.get("clean_up_tokenization_spaces"):
            return None
        backend = Tokenizer.from_file(str(entry / "tokenizer.json"))
        backend.no_truncation()  # as transformers' call without max_length sets the backend
        backend.no_padding()
        backend.encode_special_tokens = False
        return cls(entry, backend)

    def encode(self, text: str, add_special_tokens: bool = True, **kwargs: Any) -> list[int]:
        if kwargs or not isinstance(text, str):
            return self._transformers().encode(text, add_special_tokens=add_special_tokens, **kwargs)
        return self._backend.encode_batch([text], add_special_tokens=add_special_tokens)[0].ids

    def decode(self, token_ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> str:
        ids = token_ids.tolist() if hasattr(token_ids, "tolist") else token_ids
        if kwargs or not isinstance(ids, list | tuple) or any(not isinstance(i, int) for i in ids):
            return self._transformers().decode(token_ids, skip_special_tokens=skip_special_tokens, **kwargs)
        return self._backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def _transformers(self) -> Any:
        if self._full is None:
            from transformers import AutoTokenizer

            self._full = AutoTokenizer.from_pretrained(str(self._entry))
        return self._full

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._transformers()(*args, **kwargs)

    def __len__(self) -> int:
        return len(self._transformers())

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_entry", "_backend", "_full"):
            raise AttributeError(name)
        return getattr(self._transformers(), name)


# Building from the GGUF takes seconds per run (re-parse + vocab conversion); the saved copy loads in ~0.1 s.
@functools.lru_cache(maxsize=4)
def _memoised(resolved: Path, size: int, mtime_ns: int) -> Any:
    entry = tokenizer_cache_dir(resolved, size, mtime_ns)
    if (entry / "tokenizer.json").is_file():
        try:
            cached = CachedTokenizer.open(entry)
            if cached is None:
                from transformers import AutoTokenizer

                cached = AutoTokenizer.from_pretrained(str(entry))
            return cached
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
