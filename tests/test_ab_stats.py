"""The paired-ratio interval of A/B repetitions (iotrace.model.ab_stats) against values worked by hand, its t table
against the t distribution integrated here, and the speculation bench's use of it (the speedup record, the best γ
and the table cell) on hand-made runs: no model, no clock."""

from __future__ import annotations

import math
import statistics

import pytest

from iotrace.errors import InvalidValueError
from iotrace.model.ab_stats import CANNOT_TELL, GAIN, LOSS, T_95, WITHIN_NOISE, ratio_interval, t_critical_95


def test_three_ratios_give_the_geometric_mean_and_the_t2_interval_worked_by_hand() -> None:
    # Ratios 1.1, 1.2, 1.15 (baseline 1.1, 1.2, 1.15 s against 1 s each). By hand:
    #   ln r = 0.0953102, 0.1823216, 0.1397619; mean m = 0.4173937 / 3 = 0.1391312; geometric mean e^m = 1.14927
    #   deviations -0.0438210, 0.0431904, 0.0006307; s = sqrt(0.0037861 / 2) = 0.0435091; SE = s / √3 = 0.0251200
    #   t(0.975, 2) = 4.303 → half-width 0.1080914; interval e^(m ∓ 0.1080914) = 1.03153 to 1.28046
    found = ratio_interval([1.1, 1.2, 1.15], [1.0, 1.0, 1.0])
    assert found.ratios == pytest.approx((1.1, 1.2, 1.15))
    assert found.mean == pytest.approx(1.14927, abs=1e-5)
    assert found.low == pytest.approx(1.03153, abs=1e-5) and found.high == pytest.approx(1.28046, abs=1e-5)
    assert found.verdict == GAIN and found.reps == 3
    # The same ratios from other walls: only a / b matters (2.2 / 2, 0.6 / 0.5, 4.6 / 4).
    again = ratio_interval([2.2, 0.6, 4.6], [2.0, 0.5, 4.0])
    assert (again.mean, again.low, again.high) == pytest.approx((found.mean, found.low, found.high))
    record = found.to_dict()
    assert record["values"] == pytest.approx([1.1, 1.2, 1.15]) and record["verdict"] == "gain"
    assert record["a"] == [1.1, 1.2, 1.15] and record["b"] == [1.0, 1.0, 1.0] and record["confidence"] == 0.95


def test_an_interval_holding_one_is_within_noise_and_one_below_it_a_loss() -> None:
    # Ratios 0.95, 1.10, 1.02: m = (−0.0512933 + 0.0953102 + 0.0198026) / 3 = 0.0212732, geometric mean 1.02150;
    # deviations −0.0725665, 0.0740370, −0.0014705; s = sqrt(0.0107496 / 2) = 0.0733128, SE = 0.0423272,
    # half-width 4.303 × SE = 0.1821338: 0.85141 to 1.22557, which holds 1.
    noisy = ratio_interval([0.95, 1.10, 1.02], [1.0, 1.0, 1.0])
    assert noisy.mean == pytest.approx(1.02150, abs=1e-5)
    assert noisy.low == pytest.approx(0.85141, abs=1e-5) and noisy.high == pytest.approx(1.22557, abs=1e-5)
    assert noisy.verdict == WITHIN_NOISE
    assert ratio_interval([0.80, 0.82, 0.79], [1.0, 1.0, 1.0]).verdict == LOSS
    # Two repetitions: t(1) = 12.706, so ratios 1.87 and 2.13 (a clear-looking 2×) are still within noise.
    assert ratio_interval([1.87, 2.13], [1.0, 1.0]).verdict == WITHIN_NOISE


def test_one_repetition_cannot_tell() -> None:
    found = ratio_interval([3.78], [1.0])
    assert found.verdict == CANNOT_TELL == "cannot tell (one repetition)"
    assert found.low is None and found.high is None and found.mean == pytest.approx(3.78)


@pytest.mark.parametrize(("a", "b"), [([1.0, 2.0], [1.0]), ([], []), ([1.0, 0.0], [1.0, 1.0]),
                                      ([1.0, math.nan], [1.0, 1.0]), ([1.0, -1.0], [1.0, 1.0])])
def test_unpaired_or_non_positive_costs_are_refused(a: list[float], b: list[float]) -> None:
    with pytest.raises(InvalidValueError):
        ratio_interval(a, b)


def _t_cdf(t: float, df: int, intervals: int = 4000) -> float:
    """P(T ≤ t) for t ≥ 0: 1/2 plus Simpson's rule over Student's density from 0 to t."""
    scale = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    h = t / intervals
    total = 0.0
    for i in range(intervals + 1):
        weight = 1 if i in (0, intervals) else 4 if i % 2 else 2
        total += weight * (1 + (i * h) ** 2 / df) ** (-(df + 1) / 2)
    return 0.5 + scale * total * h / 3


def test_the_t_table_is_the_0975_quantile_to_its_three_decimals() -> None:
    """Each tabulated value, rounded to 3 decimals, lies within 0.0005 of the quantile: the density integrated to
    the value ∓ 0.0005 brackets 0.975."""
    for df, t in T_95.items():
        assert _t_cdf(t - 0.0005, df) < 0.975 < _t_cdf(t + 0.0005, df), df
    assert t_critical_95(2) == 4.303 and t_critical_95(30) == 2.042
    assert t_critical_95(35) == 2.042  # between rows: the smaller df's, a wider interval
    assert t_critical_95(101) == 1.96 == round(statistics.NormalDist().inv_cdf(0.975), 2)
    with pytest.raises(InvalidValueError):
        t_critical_95(0)


def _run(gamma: int, verdict: str, mean: float | None, low: float | None, high: float | None,
         proposed: int = 10) -> dict[str, object]:
    return {"gamma": gamma, "accepted": proposed // 2, "attempted": proposed, "draft_cost": 0.01 if proposed else None,
            "speedup_interval": {"verdict": verdict, "mean": mean, "low": low, "high": high}}


def test_the_best_gamma_is_a_gain_beyond_noise_never_a_run_that_proposed_nothing() -> None:
    pytest.importorskip("torch", reason="iotrace.model.spec_bench needs torch")
    from iotrace.model.spec_bench import NO_PROPOSALS, best_gamma

    runs = [_run(1, NO_PROPOSALS, None, None, None, proposed=0), _run(2, GAIN, 1.3, 1.1, 1.5),
            _run(4, GAIN, 1.45, 1.2, 1.7), _run(8, WITHIN_NOISE, 2.5, 0.9, 6.0)]
    best = best_gamma(runs)
    # γ = 8 has the largest mean but its interval holds 1; γ = 4 leads γ = 2 by less than the intervals' overlap.
    assert (best["measured"], best["gains"], best["overlapping"], best["measured_reason"]) == (4, [2, 4], [2], None)
    assert best_gamma([runs[0], _run(2, NO_PROPOSALS, None, None, None, proposed=0)])["measured"] is None
    none = best_gamma(runs[:1] + runs[3:])
    assert none["measured"] is None and "no γ measured a gain" in none["measured_reason"]
    one = best_gamma([_run(2, CANNOT_TELL, 3.78, None, None), _run(4, CANNOT_TELL, 1.5, None, None)])
    assert one["measured"] is None and one["measured_reason"].startswith("one repetition: cannot tell")


def test_the_speedup_record_and_its_table_cell() -> None:
    pytest.importorskip("torch", reason="iotrace.model.spec_bench needs torch")
    from iotrace.model.spec_bench import NO_PROPOSALS_REASON, speedup_of
    from iotrace.render.speculation import speedup_cell

    nothing = speedup_of([0.5, 0.5], [0.13, 0.2], proposed=0)  # a 3.78× wall ratio of a run that proposed nothing
    assert (nothing["mean"], nothing["low"], nothing["high"], nothing["values"]) == (None, None, None, [])
    assert nothing["reason"] == NO_PROPOSALS_REASON == "no draft tokens proposed: this was plain decoding"
    assert nothing["spec_wall_s"] == [0.13, 0.2] and speedup_cell(nothing) == NO_PROPOSALS_REASON
    gain = speedup_of([1.1, 1.2, 1.15], [1.0, 1.0, 1.0], proposed=5)
    assert gain["verdict"] == GAIN and gain["plain_wall_s"] == [1.1, 1.2, 1.15]
    assert speedup_cell(gain) == "1.15 (1.03 to 1.28)"
    noisy = speedup_of([0.95, 1.10, 1.02], [1.0, 1.0, 1.0], proposed=5)
    assert speedup_cell(noisy) == "within noise (0.85 to 1.23)" and "1.02" not in speedup_cell(noisy)
    one = speedup_of([1.61], [1.0], proposed=5)
    assert speedup_cell(one) == "one repetition: cannot tell" and one["reason"].startswith("one repetition")
    assert speedup_cell(speedup_of([0.8, 0.82, 0.79], [1.0, 1.0, 1.0], proposed=5)).endswith("loss")
