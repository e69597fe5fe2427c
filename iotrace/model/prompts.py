"""The prompts shipped with iotrace (``iotrace/data/prompts.toml``): the bench's default and the checked ones."""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources

from iotrace.errors import DataFileError

__all__ = ["default_prompt", "shipped_prompts"]


@cache
def shipped_prompts() -> dict[str, str]:
    """key -> text, in the file's order (the first is the default)."""
    try:
        raw = tomllib.loads(resources.files("iotrace.data").joinpath("prompts.toml").read_text(encoding="utf-8"))
        return {row["key"]: row["text"] for row in raw["prompt"]}
    except (OSError, KeyError, TypeError, tomllib.TOMLDecodeError) as exc:
        raise DataFileError(f"iotrace/data/prompts.toml cannot be read ({exc})",
                            "reinstall iotrace or restore the file from git") from exc


def default_prompt() -> str:
    return next(iter(shipped_prompts().values()))
