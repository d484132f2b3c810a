"""``python -m torchkiln overhead`` pairs its timings by round (as the main bench does): costs over
eager are medians of per-round differences (tiny function) or ratios (capture), with the sign-test
interval, checked here on synthetic timings whose answers are worked out by hand."""

import pytest
from torchkiln.bench import overhead, paired, timing

#: a shared machine's drift: each round's load slows every variant of that round alike (1x-3x)
DRIFT = [1.0, 2.5, 1.2, 3.0, 1.1, 2.8, 1.3]


def test_per_round_differences_need_aligned_rounds() -> None:
    assert paired.differences([10.0, 20.0], [4.0, 5.0]) == [6.0, 15.0]
    with pytest.raises(ValueError, match="one of each per round"):
        paired.differences([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="no rounds"):
        paired.differences([], [])


def test_a_round_that_hit_one_call_moves_the_paired_cost_not_the_medians_difference() -> None:
    eager = [10.0, 25.0, 12.0, 30.0, 11.0]
    # torchkiln costs 5 us more in every round, and round 5 took a 24 us hit on its call alone
    torchkiln = [15.0, 30.0, 17.0, 35.0, 40.0]
    tiny = overhead.summarise_tiny({"eager": eager, "torchkiln": torchkiln})
    # differences 5, 5, 5, 5, 29: median 5; 5 rounds give only [min, max], 1 - 2/32
    assert tiny["torchkiln"]["vs_eager_us"] == 5.0
    assert (tiny["torchkiln"]["vs_eager_us_low"], tiny["torchkiln"]["vs_eager_us_high"]) == (5, 29)
    assert tiny["torchkiln"]["confidence"] == 1 - 2 / 32 and tiny["torchkiln"]["rounds"] == 5
    # the difference of the two medians (30 - 12) is what the unpaired report used to say
    assert timing.median(torchkiln) - timing.median(eager) == 18.0
    assert tiny["torchkiln"]["us_per_call"] == 30.0
    assert tiny["eager"]["vs_eager_us"] == 0.0 and tiny["eager"]["us_per_call"] == 12.0


def test_capture_overhead_is_the_median_per_round_ratio_under_drift() -> None:
    eager = [100.0 * d for d in DRIFT]
    captured = [120.0 * d for d in DRIFT]  # 20% over eager in every round
    mlp = overhead.summarise_capture({"eager": eager, "capture": captured})
    assert mlp["overhead_pct"] == pytest.approx(20.0)
    assert mlp["overhead_pct_low"] == pytest.approx(20.0)
    assert mlp["overhead_pct_high"] == pytest.approx(20.0)
    assert mlp["confidence"] == pytest.approx(1 - 2 / 128) and mlp["rounds"] == 7
    assert mlp["eager_us"] == pytest.approx(130.0) and mlp["capture_us"] == pytest.approx(156.0)


def test_the_report_shows_the_intervals() -> None:
    result = {
        "tiny": overhead.summarise_tiny(
            {"eager": [10.0, 25.0, 12.0, 30.0, 11.0], "torchkiln": [15.0, 30.0, 17.0, 35.0, 40.0]}
        ),
        "capture_mlp": overhead.summarise_capture(
            {"eager": [100.0 * d for d in DRIFT], "capture": [120.0 * d for d in DRIFT]}
        ),
        "notes": [],
    }
    text = overhead.render(result)
    assert "torchkiln          30.00 us/call  (+5.00 us vs eager, 94% interval +5.00..+29.00)" in (
        text
    )
    assert "eager              12.00 us/call  (+0.00 us vs eager)" in text
    assert "(+20.0% over eager, 98% interval +20.0..+20.0%)" in text
