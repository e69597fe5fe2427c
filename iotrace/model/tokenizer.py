"""The tokenizer of a GGUF, built from the file's own vocabulary by ``transformers``' GGUF support.

A GGUF carries its tokenizer (``tokenizer.ggml.model``, ``.tokens``, ``.merges``, ``.pre``); ``transformers``
converts it into a ``tokenizers`` fast tokenizer (``integrations/ggml.py``), the same one its ``LlamaForCausalLM``
check in the tests loads, so the token ids agree by construction. Offline: nothing is downloaded.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from iotrace.model.gguf_file import MODEL_INSTALL, MissingModelDependencyError

__all__ = ["gguf_tokenizer"]


def gguf_tokenizer(path: Path) -> Any:
    """A ``transformers`` fast tokenizer from the GGUF at ``path``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local file: never ask the Hub
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise MissingModelDependencyError("text prompts need the Python package 'transformers', which is not "
                                          "installed", f"{MODEL_INSTALL}; or pass --prompt-tokens N") from None
    path = Path(path)
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
