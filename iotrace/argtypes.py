"""Command-line value types: each parses one flag's text or raises ``argparse.ArgumentTypeError`` naming it.

Two kinds of "k" live here, and the names say which: :func:`si_number` reads k, M, B/G, T as powers of 1000
(parameters, FLOPs, rates: ``27B`` = 27e9), :func:`binary_count` reads k as 1024 (tokens and bytes: ``8k`` = 8192).
The command line (:mod:`iotrace.cli`) and the pytest plugin's options both use them, so this module imports nothing
of iotrace and nothing heavy.
"""

from __future__ import annotations

import argparse
import decimal
import math
import re
from collections.abc import Callable

__all__ = ["MAX_COUNT", "binary_count", "bits", "bits_or_zero", "count_at_least", "key_values", "positive_number",
           "si_number"]

_SI = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_NUMBER = re.compile(r"^([+-]?[0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmbgt]?)$")

#: The largest whole number a flag takes: beyond 2^53 a float cannot hold every integer.
MAX_COUNT = 2**53


def si_number(text: str) -> float:
    """A real number with an SI suffix: ``27e9``, ``27B``, ``8.03b``, ``936.2``, ``70M`` (k, M, B/G, T = 1000^n).

    Ranges are checked where the value is used, so the message can say what the value means.
    """
    match = _NUMBER.match(text.strip().lower())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number (e.g. 27e9, 27B, 0.5)")
    value = float(match.group(1)) * _SI[match.group(2)]
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def binary_count(text: str) -> int:
    """A whole number: ``8192``, ``8k`` = 8192 (k counts tokens and bytes in 1024s), or ``1e9`` (a power of ten
    written as people write it; it must come out whole: ``1.5e3`` is 1500, ``1e-3`` is refused)."""
    cleaned = text.strip().lower()
    scale = 1024 if cleaned.endswith("k") else 1
    body = cleaned[:-1] if scale == 1024 else cleaned
    if re.fullmatch(r"-?[0-9]{1,20}", body):
        value = int(body) * scale
    elif scale == 1 and re.fullmatch(r"-?[0-9]{1,20}(?:\.[0-9]{1,20})?e\+?[0-9]{1,2}", body):
        exact = decimal.Decimal(body)  # exact, unlike float: 1e9 and 1.5e3 are whole, 1.0000001e3 is not
        if exact != exact.to_integral_value():
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number (e.g. 256, 8k, 1e9)")
        value = int(exact)
    else:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number (e.g. 256, 8k, 1e9)")
    if abs(value) > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{text!r} is larger than any real count (at most 2^53)")
    return value


def count_at_least(minimum: int) -> Callable[[str], int]:
    """A type: a whole number as :func:`binary_count` reads it, of at least ``minimum``."""
    def whole(text: str) -> int:
        value = binary_count(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} must be {minimum} or more")
        return value

    return whole


def positive_number(text: str) -> float:
    """A type: a finite number above 0 (a time, a ratio), as :func:`si_number` reads it."""
    value = si_number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a number above 0, e.g. 0.05")
    return value


def bits(text: str) -> float:
    """Bits per value: above 0, at most 64."""
    value = si_number(text)
    if value <= 0 or value > 64:
        raise argparse.ArgumentTypeError(f"{text!r} bits per value is outside 0 < bits <= 64")
    return value


def bits_or_zero(text: str) -> float:
    """Bits per value where 0 means "none counted" (``math kv --weight-bits 0``: the KV cache alone): 0 to 64."""
    value = si_number(text)
    if value < 0 or value > 64:
        raise argparse.ArgumentTypeError(f"{text!r} bits per value is outside 0 <= bits <= 64 (0: not counted)")
    return value


def key_values(text: str) -> dict[str, int | bool]:
    """``K=V,K=V`` with whole-number values (``true``/``false`` for switches): a shape or a config."""
    out: dict[str, int | bool] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(f"{item!r} is not KEY=VALUE (e.g. M=4096,N=4096)")
        if key.strip() in out:
            raise argparse.ArgumentTypeError(f"{key.strip()} is given twice in {text!r}")
        value = value.strip().lower()
        if value in ("true", "false"):
            out[key.strip()] = value == "true"
        else:
            try:
                out[key.strip()] = binary_count(value)
            except argparse.ArgumentTypeError:
                raise argparse.ArgumentTypeError(f"{key.strip()}={value!r} is not a whole number") from None
    if not out:
        raise argparse.ArgumentTypeError(f"{text!r} names nothing (e.g. M=4096,N=4096)")
    return out


def layer_counts(text: str) -> tuple[int, ...]:
    """``0,10,99``: llama-bench ``-ngl`` values, one per table, each a whole number >= 0."""
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not whole numbers separated by commas") from None
    if any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: layer counts are >= 0")
    return values
