import math
from collections import Counter

import pytest
from torchkiln.bench import paired, timing


def test_median_on_known_timings() -> None:
    eager = [10.0, 12.0, 11.0, 50.0, 9.0]  # one outlier: the median ignores it
    compiled = [5.0, 5.5, 4.0, 6.0, 100.0]
    assert timing.median(eager) == 11.0
    assert timing.median(compiled) == 5.5
    assert timing.median([1.0, 2.0, 3.0, 4.0]) == 2.5
    with pytest.raises(ValueError):
        timing.median([])


def test_compile_time_subtracts_an_eager_call() -> None:
    assert timing.compile_seconds(3.25, 0.25) == pytest.approx(3.0)
    assert timing.compile_seconds(0.1, 0.2) == 0.0  # never negative


def test_geometric_mean_skips_missing() -> None:
    assert timing.geometric_mean([2.0, 8.0]) == pytest.approx(4.0)
    assert timing.geometric_mean([2.0, None, 8.0]) == pytest.approx(4.0)
    assert timing.geometric_mean([None]) is None


def test_interleaving_rotates_order_and_warms_up() -> None:
    calls: list[str] = []
    clock = {"eager": 2.0, "compiled": 1.0}
    fns = {name: (lambda name=name: calls.append(name)) for name in clock}
    order: list[str] = []

    def fake_measure(fn):  # a fake clock: each variant takes a fixed time
        fn()
        order.append(calls[-1])
        return clock[calls[-1]]

    times = timing.interleaved(fns, repeat=4, warmup=2, measure=fake_measure)
    assert calls[:4] == ["eager", "compiled", "eager", "compiled"]  # warm-up, not timed
    assert order == [
        "eager",
        "compiled",
        "compiled",
        "eager",
        "eager",
        "compiled",
        "compiled",
        "eager",
    ]
    assert times == {"eager": [2.0] * 4, "compiled": [1.0] * 4}
    assert paired.paired_ratio(times["eager"], times["compiled"]).median == 2.0


def test_three_variants_take_turns_first_and_after_each_other() -> None:
    cycle = timing.round_orders(["e", "k", "c"])
    assert ["".join(order) for order in cycle] == ["ekc", "kce", "cek", "cke", "kec", "eck"]
    assert Counter(order[0] for order in cycle) == {"e": 2, "k": 2, "c": 2}
    # every variant runs right after every other one equally often: carry-over effects balance
    followers = Counter((a, b) for order in cycle for a, b in zip(order, order[1:]))
    assert set(followers.values()) == {2} and len(followers) == 6
    assert timing.round_order(["e", "k", "c"], 7) == ["k", "c", "e"]
    # the rounds of interleaved() run in exactly that order, one call of each variant per round
    ran: list[str] = []
    fns = {name: (lambda name=name: ran.append(name)) for name in "ekc"}
    times = timing.interleaved(fns, repeat=7, warmup=0, measure=lambda fn: fn() or 1.0)
    assert ran == [name for r in range(7) for name in timing.round_order(list("ekc"), r)]
    assert {name: len(ms) for name, ms in times.items()} == {"e": 7, "k": 7, "c": 7}


def test_cpu_timer_measures_wall_time() -> None:
    import time

    timer = timing.Timer("cpu")
    ms = timer.ms(lambda: time.sleep(0.01))
    assert 9.0 <= ms < 200.0
    seconds, value = timer.wall(lambda: 42)
    assert value == 42 and 0 <= seconds < 0.1 and not math.isnan(seconds)


def test_spread_quartiles_and_noise_on_known_timings() -> None:
    quiet = timing.spread([10.0, 10.2, 9.9, 10.1, 10.0])
    assert (quiet.low, quiet.median, quiet.high) == (9.9, 10.0, 10.2)
    assert (quiet.q1, quiet.q3) == (10.0, 10.1)
    assert quiet.relative_iqr == pytest.approx(0.01)
    loud = timing.spread([10.0, 14.0, 8.0, 12.0, 9.0])  # q1 9, q3 12: 30% of the median 10
    assert loud.relative_iqr == pytest.approx(0.3)
    assert loud.as_dict() == {
        "low": 8.0,
        "q1": 9.0,
        "median": 10.0,
        "q3": 12.0,
        "high": 14.0,
        "relative_iqr": pytest.approx(0.3),
    }
    assert timing.spread([3.0]).relative_iqr == 0.0
    with pytest.raises(ValueError):
        timing.spread([])


def test_cpu_clock_does_not_count_waiting():
    import time

    from torchkiln.bench import timing

    nap = lambda: time.sleep(0.05)  # noqa: E731 - waits, uses no CPU
    assert timing.Timer("cpu", clock="wall").ms(nap) >= 45
    assert timing.Timer("cpu", clock="cpu").ms(nap) < 20
    with pytest.raises(ValueError, match="unknown clock"):
        timing.Timer("cpu", clock="sundial")
