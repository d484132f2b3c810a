"""Paired speedups: the ratio of two variants' times taken round by round, then summarised.

The benchmark times every variant once per round (``timing.interleaved``). On a shared machine a
round's timings all drift together (another job takes a core, the clock slows), so the ratio of
two variants *within* a round cancels what the round did to both, while the ratio of their
separate medians does not. A speedup is therefore the median over rounds of
``reference_ms[r] / candidate_ms[r]`` (eager / torchkiln, eager / torch.compile, and
torch.compile / torchkiln for the head-to-head), reported with a distribution-free
confidence interval for that median, and a comparison is a verdict only when the interval
leaves 1.0 out.

A cost added per call (the overhead bench) is summarised the same way as a per-round difference
``candidate_ms[r] - reference_ms[r]`` (``paired_difference``).

The interval is the sign test's: with ``n`` ratios sorted, ``[x(k), x(n+1-k)]`` contains the
true median with probability ``1 - 2 * P(Binomial(n, 1/2) < k)``; we take the narrowest such
interval whose coverage reaches ``CONFIDENCE`` (or ``[min, max]`` and its lower coverage when
there are too few rounds). It needs no random resampling, so the same timings always give the
same interval.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

#: the coverage the interval of a paired ratio aims for
CONFIDENCE = 0.90
#: a ratio is "noisy" when its interval is wider than this fraction of its median: the rounds
#: disagree enough that the digits of the median are not all a result
NOISY_WIDTH = 0.10

#: the verdicts of one variant against another (its ratio's interval above, below or across 1.0)
AHEAD, BEHIND, TIE = "ahead", "behind", "tie"


def _check_rounds(first: Sequence[float], second: Sequence[float], what: str) -> None:
    """Paired timings are aligned by round: one of each per round, and at least one round."""
    if len(first) != len(second):
        raise ValueError(
            f"paired timings need one of each per round; got {len(first)} and {len(second)} rounds"
        )
    if not first:
        raise ValueError(f"a paired {what} of no rounds")


def ratios(numerator_ms: Sequence[float], denominator_ms: Sequence[float]) -> list[float]:
    """``numerator_ms[r] / denominator_ms[r]`` for every round ``r`` (both timed in round r)."""
    _check_rounds(numerator_ms, denominator_ms, "ratio")
    return [float(n) / float(d) for n, d in zip(numerator_ms, denominator_ms, strict=True)]


def median_interval(
    values: Sequence[float], confidence: float = CONFIDENCE
) -> tuple[float, float, float]:
    """``(low, high, coverage)``: the sign-test interval for the median of ``values`` (see the
    module docstring); ``coverage`` is the probability it holds the median, ``confidence`` or more
    unless there are too few values to reach it."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("an interval of no values")

    def coverage(k: int) -> float:  # of [x(k), x(n+1-k)], k counted from 1
        return 1.0 - 2.0 * sum(math.comb(n, i) for i in range(k)) / 2.0**n

    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(k + 1) >= confidence:
        k += 1
    return ordered[k - 1], ordered[n - k], max(0.0, coverage(k))


@dataclass(frozen=True)
class PairedRatio:
    """The per-round ratios of two variants summarised: median, its interval, quartiles."""

    median: float
    low: float  # the interval for the median (coverage ``confidence``)
    high: float
    confidence: float
    q1: float  # quartiles of the per-round ratios (how much single rounds disagree)
    q3: float
    rounds: int

    @property
    def relative_width(self) -> float:
        """(high - low) / median: 0 when every round gave the same ratio."""
        return (self.high - self.low) / self.median if self.median > 0 else 0.0

    def noisy(self, threshold: float = NOISY_WIDTH) -> bool:
        return self.relative_width > threshold

    @property
    def verdict(self) -> str:
        """AHEAD when the whole interval is above 1.0, BEHIND when below, TIE when it holds 1.0."""
        if self.low > 1.0:
            return AHEAD
        if self.high < 1.0:
            return BEHIND
        return TIE


def paired_ratio(
    numerator_ms: Sequence[float], denominator_ms: Sequence[float], confidence: float = CONFIDENCE
) -> PairedRatio:
    """The paired ratio ``numerator / denominator`` of two variants' per-round timings; with
    ``numerator`` the slower reference (eager, or the peer) it reads as a speedup of
    ``denominator`` (>1: the denominator's variant is faster)."""
    per_round = ratios(numerator_ms, denominator_ms)
    low, high, covered = median_interval(per_round, confidence)
    if len(per_round) == 1:
        q1 = q3 = per_round[0]
    else:
        q1, _, q3 = statistics.quantiles(per_round, n=4, method="inclusive")
    return PairedRatio(
        float(statistics.median(per_round)), low, high, covered, q1, q3, len(per_round)
    )


def differences(minuend: Sequence[float], subtrahend: Sequence[float]) -> list[float]:
    """``minuend[r] - subtrahend[r]`` for every round ``r`` (both timed in round r)."""
    _check_rounds(minuend, subtrahend, "difference")
    return [float(a) - float(b) for a, b in zip(minuend, subtrahend, strict=True)]


@dataclass(frozen=True)
class PairedDifference:
    """The per-round differences of two variants summarised: median and its interval. A cost
    added per call (``python -m torchkiln overhead``) is a difference, not a ratio: it should not
    grow when the round's load slows the call it is added to."""

    median: float
    low: float  # the interval for the median (coverage ``confidence``)
    high: float
    confidence: float
    rounds: int


def paired_difference(
    minuend: Sequence[float], subtrahend: Sequence[float], confidence: float = CONFIDENCE
) -> PairedDifference:
    """The paired difference ``minuend - subtrahend`` of two variants' per-round timings (the
    median over rounds and its sign-test interval)."""
    per_round = differences(minuend, subtrahend)
    low, high, covered = median_interval(per_round, confidence)
    return PairedDifference(float(statistics.median(per_round)), low, high, covered, len(per_round))


def count_verdicts(verdicts: Sequence[str | None]) -> dict[str, int]:
    """How many of ``verdicts`` are AHEAD, BEHIND and TIE (None, a missing comparison, skipped)."""
    return {name: sum(v == name for v in verdicts) for name in (AHEAD, BEHIND, TIE)}
