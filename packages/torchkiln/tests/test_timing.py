import math

import pytest
from torchkiln.bench import timing


def test_median_and_speedup_on_known_timings() -> None:
    eager = [10.0, 12.0, 11.0, 50.0, 9.0]  # one outlier: the median ignores it
    compiled = [5.0, 5.5, 4.0, 6.0, 100.0]
    assert timing.median(eager) == 11.0
    assert timing.median(compiled) == 5.5
    assert timing.speedup(eager, compiled) == pytest.approx(2.0)
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
    assert timing.speedup(times["eager"], times["compiled"]) == 2.0


def test_cpu_timer_measures_wall_time() -> None:
    import time

    timer = timing.Timer("cpu")
    ms = timer.ms(lambda: time.sleep(0.01))
    assert 9.0 <= ms < 200.0
    seconds, value = timer.wall(lambda: 42)
    assert value == 42 and 0 <= seconds < 0.1 and not math.isnan(seconds)
