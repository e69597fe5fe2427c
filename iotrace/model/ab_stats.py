"""A-vs-B figures that survive noise: a ratio from alternated, paired repetitions with a 95% confidence interval.

Each repetition i times the baseline A and the candidate B back to back (alternated, so a drift of the machine's
clock, temperature or load between repetitions moves both), giving the ratio r_i = a_i / b_i (A's cost over B's:
above 1, B is faster). Timing noise is multiplicative, so the interval is worked on the logs: the mean m and the
sample standard deviation s of ln r_i, the 95% Student-t interval m ± t(n − 1)·s/√n, and back through exp. The
point estimate exp(m) is the geometric mean of the ratios (the mean that treats 2× and 0.5× as symmetric).

A ratio whose interval holds 1 is "within noise", never a gain; one repetition gives no interval ("cannot tell").
No scipy: the t critical values are a table (:data:`T_95`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from iotrace.errors import InvalidValueError

__all__ = ["CANNOT_TELL", "GAIN", "LOSS", "T_95", "WITHIN_NOISE", "RatioInterval", "ratio_interval", "t_critical_95"]

#: Two-sided 95% critical values of Student's t (the upper 0.975 quantile) by degrees of freedom: NIST/SEMATECH
#: e-Handbook of Statistical Methods, section 1.3.6.7.2, "Critical Values of the Student's t Distribution"
#: (www.itl.nist.gov/div898/handbook/eda/section3/eda3672.htm), the 0.975 column, df 1..30 and the rows 40..100.
T_95: dict[int, float] = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
    11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086,
    21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042,
    40: 2.021, 50: 2.009, 60: 2.000, 70: 1.994, 80: 1.990, 90: 1.987, 100: 1.984}
#: Beyond the table: the normal distribution's 0.975 quantile (the same handbook's last row, df = ∞).
Z_95 = 1.960

GAIN = "gain"
LOSS = "loss"
WITHIN_NOISE = "within noise"
CANNOT_TELL = "cannot tell (one repetition)"


def t_critical_95(df: int) -> float:
    """t(0.975, df); between the table's rows, the row of the next smaller df (a larger t: a wider, conservative
    interval); beyond 100, 1.96."""
    if df < 1:
        raise InvalidValueError(f"{df} degrees of freedom", "an interval needs at least two repetitions")
    if df > max(T_95):
        return Z_95
    return T_95[max(k for k in T_95 if k <= df)]


@dataclass(frozen=True)
class RatioInterval:
    """The ratio a/b over paired repetitions: per-repetition values, geometric mean and 95% interval, verdict."""

    #: the baseline's cost per repetition (e.g. plain decoding's wall, seconds)
    a: tuple[float, ...]
    #: the candidate's cost per repetition, paired with ``a``
    b: tuple[float, ...]
    #: a_i / b_i
    ratios: tuple[float, ...]
    #: the geometric mean of ``ratios``
    mean: float
    #: the 95% interval's bounds; None with one repetition
    low: float | None
    high: float | None
    #: GAIN (interval wholly above 1), LOSS (wholly below), WITHIN_NOISE (it holds 1) or CANNOT_TELL (one pair)
    verdict: str
    confidence: float = 0.95

    @property
    def reps(self) -> int:
        return len(self.ratios)

    def to_dict(self) -> dict[str, Any]:
        return {"mean": self.mean, "low": self.low, "high": self.high, "confidence": self.confidence,
                "reps": self.reps, "values": list(self.ratios), "a": list(self.a), "b": list(self.b),
                "verdict": self.verdict}


def ratio_interval(a_values: Sequence[float], b_values: Sequence[float]) -> RatioInterval:
    """The paired ratio a_i / b_i of alternated repetitions with its 95% t-interval on the log scale and verdict."""
    if len(a_values) != len(b_values) or not a_values:
        raise InvalidValueError(f"{len(a_values)} baseline and {len(b_values)} candidate repetitions",
                                "pair each baseline repetition with one candidate repetition")
    if any(not (math.isfinite(v) and v > 0) for v in (*a_values, *b_values)):
        raise InvalidValueError("a repetition's cost is not a positive finite number",
                                "time each repetition (a ratio needs costs above 0)")
    ratios = tuple(a / b for a, b in zip(a_values, b_values, strict=True))
    logs = [math.log(r) for r in ratios]
    m = statistics.fmean(logs)
    if len(logs) < 2:
        return RatioInterval(tuple(a_values), tuple(b_values), ratios, math.exp(m), None, None, CANNOT_TELL)
    half = t_critical_95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    low, high = math.exp(m - half), math.exp(m + half)
    verdict = GAIN if low > 1 else LOSS if high < 1 else WITHIN_NOISE
    return RatioInterval(tuple(a_values), tuple(b_values), ratios, math.exp(m), low, high, verdict)
