"""Timing as the PyTorch compiler benchmarks do it: warm-up, interleaved runs, medians.

Eager and compiled runs alternate within each round so clock drift and thermal effects hit every
variant alike, and the timings of one round are kept together so that ``paired`` can compare two
variants round by round. Each round runs the variants in the order ``round_order`` gives: the
rotations of their list, then the rotations of the reversed list, so that over a cycle every
variant goes first equally often and (for up to three variants) runs right after each other one
equally often: whatever one call leaves behind for the next (a warm cache, a cold one, a clock
raised by load) is shared out evenly. On CUDA each run is timed with CUDA
events after a synchronize; on CPU with ``time.perf_counter``, or ``time.process_time`` with
``--clock cpu`` (CPU time: robust to a shared machine when run with one thread).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no timings")
    return float(statistics.median(values))


@dataclass(frozen=True)
class Spread:
    """How the runs of one variant spread: min, quartiles, median, max (milliseconds).

    Kept per timing in the JSON; whether a *comparison* is noise is judged on the paired ratio
    (``paired.PairedRatio``), since drift that moves every variant of a round alike widens each
    timing's spread without touching their ratio."""

    low: float
    q1: float
    median: float
    q3: float
    high: float

    @property
    def relative_iqr(self) -> float:
        """(q3 - q1) / median: 0 for identical runs."""
        return (self.q3 - self.q1) / self.median if self.median > 0 else 0.0

    def as_dict(self) -> dict[str, float]:
        """The fields and ``relative_iqr`` (the JSON's ``spreads`` entries)."""
        return {**dataclasses.asdict(self), "relative_iqr": self.relative_iqr}


def spread(values: Sequence[float]) -> Spread:
    """The spread of ``values`` (quartiles by the inclusive method: exact for few runs)."""
    if not values:
        raise ValueError("spread of no timings")
    ordered = sorted(float(v) for v in values)
    if len(ordered) == 1:
        q1 = q3 = ordered[0]
    else:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    return Spread(ordered[0], q1, median(ordered), q3, ordered[-1])


def compile_seconds(first_compiled_call_s: float, eager_call_s: float) -> float:
    """Compile time: the first compiled call's wall time minus what an eager call costs."""
    return max(0.0, first_compiled_call_s - eager_call_s)


def geometric_mean(values: Sequence[float]) -> float | None:
    kept = [v for v in values if v is not None and v > 0]
    if not kept:
        return None
    return float(statistics.geometric_mean(kept))


#: how CPU runs are timed: wall time, or the process's CPU time (see Timer)
CLOCKS = ("wall", "cpu")


class Timer:
    """Measures one call of a function in milliseconds on ``device``."""

    def __init__(self, device: str | torch.device = "cpu", clock: str = "wall") -> None:
        self.cuda = torch.device(device).type == "cuda"
        if clock not in CLOCKS:
            raise ValueError(f"unknown clock {clock!r}; pick one of {', '.join(CLOCKS)}")
        # "cpu": the process's CPU time (all its threads). On a machine shared with other jobs a
        # single-threaded run's CPU time does not count the time the process waited for a core,
        # which its wall time does; with several threads it counts OpenMP's spinning too.
        self.clock = time.process_time if clock == "cpu" and not self.cuda else time.perf_counter

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def wall(self, fn: Callable[[], Any]) -> tuple[float, Any]:
        """Seconds of wall time for one call (synchronized) and its result."""
        self.sync()
        start = time.perf_counter()
        result = fn()
        self.sync()
        return time.perf_counter() - start, result

    def ms(self, fn: Callable[[], Any]) -> float:
        if self.cuda:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            begin.record()
            fn()
            end.record()
            end.synchronize()
            return float(begin.elapsed_time(end))
        start = self.clock()
        fn()
        return (self.clock() - start) * 1e3


def round_orders(names: Sequence[str]) -> list[list[str]]:
    """The cycle of orders the rounds run ``names`` in (see the module docstring): for
    ``a, b, c`` it is abc, bca, cab, cba, bac, acb; for two names ab, ba."""
    names = list(names)
    orders: list[list[str]] = []
    for base in (names, names[::-1]):
        for shift in range(len(base)):
            order = base[shift:] + base[:shift]
            if order not in orders:
                orders.append(order)
    return orders


def round_order(names: Sequence[str], round_index: int) -> list[str]:
    """The order in which round ``round_index`` (from 0) runs ``names``."""
    cycle = round_orders(names)
    return cycle[round_index % len(cycle)]


def interleaved(
    fns: Mapping[str, Callable[[], Any]],
    *,
    repeat: int,
    warmup: int = 3,
    measure: Callable[[Callable[[], Any]], float] | None = None,
) -> dict[str, list[float]]:
    """Times of ``repeat`` rounds; each round runs every function once, in ``round_order``.

    ``times[name][r]`` is the time of ``name`` in round ``r``: the lists are aligned by round, so
    ``paired.paired_ratio(times[a], times[b])`` compares the two within each round.
    ``measure(fn) -> ms`` defaults to a CPU ``Timer``; tests pass a fake clock.
    """
    measure = measure or Timer().ms
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    cycle = round_orders(names)
    for round_index in range(repeat):
        for name in cycle[round_index % len(cycle)]:
            times[name].append(measure(fns[name]))
    return times
