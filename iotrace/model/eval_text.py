"""The shipped evaluation text (``iotrace/data/eval_text.toml``) and its length in tokens, read without torch: a
command checks a ``--tokens`` against it before the model or its tokenizer loads."""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources
from typing import Any

from iotrace.errors import DataFileError, InvalidValueError

__all__ = ["EVAL_TEXT_SOURCE", "check_tokens", "reference_text", "reference_tokens"]

#: One line naming the shipped text, for headers and notes.
EVAL_TEXT_SOURCE = "Jane Austen, Pride and Prejudice, chapters 1-3 (1813; public domain; iotrace/data/eval_text.toml)"


@cache
def _eval_file() -> dict[str, Any]:
    try:
        raw = resources.files("iotrace.data").joinpath("eval_text.toml").read_text(encoding="utf-8")
        data = tomllib.loads(raw)
        data["text"]["body"] = data["text"]["body"].strip()
        data["text"]["tokens"] = int(data["text"]["tokens"])
        return data
    except (OSError, KeyError, TypeError, ValueError, tomllib.TOMLDecodeError) as exc:
        raise DataFileError(f"iotrace/data/eval_text.toml cannot be read ({exc})",
                            "reinstall iotrace or restore the file from git") from exc


def reference_text() -> str:
    """The shipped evaluation text (:func:`reference_tokens` tokens of the pinned model's tokenizer)."""
    return _eval_file()["text"]["body"]


def reference_tokens() -> int:
    """How many tokens the pinned model's tokenizer makes of :func:`reference_text` (3,669), as the file states it."""
    return _eval_file()["text"]["tokens"]


def check_tokens(tokens: int | None) -> None:
    """Refuse ``--tokens`` past the shipped text, from its stated length: before the tokenizer (seconds to build,
    more on a cold cache) and the model load. :func:`iotrace.model.quality.text_ids` checks again on the real ids."""
    if tokens is not None and tokens > reference_tokens():
        raise InvalidValueError(f"--tokens {tokens}: the evaluation text has {reference_tokens()} tokens",
                                f"pass --tokens {reference_tokens()} or fewer")
