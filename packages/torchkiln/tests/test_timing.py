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


def test_spread_quartiles_and_noise_on_known_timings() -> None:
    quiet = timing.spread([10.0, 10.2, 9.9, 10.1, 10.0])
    assert (quiet.low, quiet.median, quiet.high) == (9.9, 10.0, 10.2)
    assert (quiet.q1, quiet.q3) == (10.0, 10.1)
    assert quiet.relative_iqr == pytest.approx(0.01)
    assert not quiet.noisy()
    loud = timing.spread([10.0, 14.0, 8.0, 12.0, 9.0])  # q1 9, q3 12: 30% of the median 10
    assert loud.relative_iqr == pytest.approx(0.3)
    assert loud.noisy() and not loud.noisy(threshold=0.5)
    assert timing.spread([3.0]).relative_iqr == 0.0
    with pytest.raises(ValueError):
        timing.spread([])


def test_the_table_shows_spreads_fits_the_width_and_warns_on_noise() -> None:
    import dataclasses

    from torchkiln.bench import table
    from torchkiln.bench.runner import Row

    quiet = dataclasses.asdict(timing.spread([1.0, 1.01, 0.99, 1.0]))
    loud = dataclasses.asdict(timing.spread([2.0, 3.0, 1.0, 2.5, 1.5]))
    rows = [
        Row("calm", "zoo", "cpu", "float32", 1, eager_ms=1.0, torchkiln_ms=1.0, speedup=1.0,
            accuracy="pass", spreads={"eager": quiet, "torchkiln": quiet}),
        Row("jumpy", "zoo", "cpu", "float32", 1, eager_ms=2.0, torchkiln_ms=1.0, speedup=2.0,
            accuracy="pass", spreads={"eager": loud, "torchkiln": quiet}),
    ]
    for width in (60, 80, 100, 140):
        text = table.render(rows, width=width)
        lines = text.splitlines()
        assert max(len(line) for line in lines) <= width
        # nothing cropped: every line of the table ends on its right border, every column shown
        body = [line.rstrip() for line in lines if line[:1] in "┏┃┡│├└"]
        assert body and all(line[-1] in "┓┃┩│┤┘" for line in body), text
        assert sum("pass" in line for line in body) == 2, text
        flat = " ".join(text.split())  # rich wraps the lines under the table at spaces
        assert "warning: 1 timing(s) marked ! disagree" in flat and "jumpy eager (50%)" in flat
    wide = table.render(rows, width=240)
    assert "2.000 (1-3)!" in wide and "1.000 (0.99-1.01)" in wide
    assert "warning" not in table.render(rows[:1], width=240)


def test_cpu_clock_does_not_count_waiting():
    import time

    from torchkiln.bench import timing

    nap = lambda: time.sleep(0.05)  # noqa: E731 - waits, uses no CPU
    assert timing.Timer("cpu", clock="wall").ms(nap) >= 45
    assert timing.Timer("cpu", clock="cpu").ms(nap) < 20
    with pytest.raises(ValueError, match="unknown clock"):
        timing.Timer("cpu", clock="sundial")
