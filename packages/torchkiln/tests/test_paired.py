"""Paired speedups: per-round ratios, their sign-test interval, the verdicts, the row's JSON fields
and the table's columns, on synthetic timings whose answers are worked out by hand."""

import json
import math
import random

import pytest
from torchkiln.bench import paired, record, table, timing
from torchkiln.bench.record import Row

#: a shared machine's drift: each round's load slows every variant of that round alike (1x-3x)
DRIFT = [1.0, 2.5, 1.2, 3.0, 1.1, 2.8, 1.3]


def test_per_round_ratios_need_aligned_rounds() -> None:
    assert paired.ratios([10.0, 20.0], [5.0, 4.0]) == [2.0, 5.0]
    with pytest.raises(ValueError, match="one of each per round"):
        paired.ratios([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="no rounds"):
        paired.ratios([], [])


def test_the_sign_test_interval_on_hand_checked_counts() -> None:
    # 5 values: only [min, max] reaches 90%: it misses the median when all 5 fall on one side,
    # probability 2 / 2**5
    assert paired.median_interval([3.0, 1.0, 5.0, 2.0, 4.0]) == (1.0, 5.0, 1 - 2 / 32)
    # 4 values: [min, max] is the best there is, 1 - 2/16 = 87.5%, reported as such
    assert paired.median_interval([4.0, 1.0, 3.0, 2.0]) == (1.0, 4.0, 0.875)
    assert paired.median_interval([7.0]) == (7.0, 7.0, 0.0)
    # 30 values: [x(11), x(20)] covers with 1 - 2 P(Bin(30, 1/2) <= 10) = 0.9013 (x(12)..x(19)
    # would cover only 0.80)
    low, high, covered = paired.median_interval([float(v) for v in range(1, 31)])
    assert (low, high) == (11.0, 20.0)
    assert covered == pytest.approx(1 - 2 * sum(math.comb(30, i) for i in range(11)) / 2**30)
    assert covered == pytest.approx(0.9013, abs=1e-4)
    with pytest.raises(ValueError):
        paired.median_interval([])


def test_drift_that_slows_both_variants_of_a_round_cancels_in_the_paired_ratio() -> None:
    tc = [10.0 * d for d in DRIFT]  # torch.compile: 10 ms on a quiet machine
    tk = [10.0 / 1.1 * d for d in DRIFT]  # torchkiln: 1.1x faster in every round
    # each timing alone spreads over 3x: its interquartile range is most of its median
    assert timing.spread(tc).relative_iqr > 1.0 and timing.spread(tk).relative_iqr > 1.0
    ratio = paired.paired_ratio(tc, tk)
    assert ratio.median == pytest.approx(1.1) and ratio.rounds == 7
    assert ratio.low == pytest.approx(1.1) and ratio.high == pytest.approx(1.1)
    assert ratio.confidence >= paired.CONFIDENCE  # 7 rounds: [x(1), x(7)], 1 - 2/128
    assert ratio.verdict == paired.AHEAD and not ratio.noisy()


def test_verdicts_tie_when_the_interval_holds_one() -> None:
    ones = [1.0] * 5
    tie = paired.paired_ratio([0.9, 1.1, 0.95, 1.05, 1.0], ones)
    assert (tie.median, tie.low, tie.high, tie.verdict) == (1.0, 0.9, 1.1, paired.TIE)
    assert tie.relative_width == pytest.approx(0.2) and tie.noisy()
    assert (tie.q1, tie.q3) == (0.95, 1.05)
    behind = paired.paired_ratio([0.8, 0.9, 0.85, 0.82, 0.88], ones)
    assert behind.verdict == paired.BEHIND and behind.high == 0.9
    # 30 rounds of torchkiln 1.00x-1.29x faster, shuffled: the interval is x(11)..x(20)
    rounds = [1.0 + i / 100 for i in range(30)]
    random.Random(0).shuffle(rounds)
    ahead = paired.paired_ratio(rounds, [1.0] * 30)
    assert (ahead.low, ahead.high) == pytest.approx((1.10, 1.19))
    assert ahead.median == pytest.approx(1.145) and ahead.verdict == paired.AHEAD
    assert paired.count_verdicts(["ahead", "tie", None, "ahead"]) == {
        "ahead": 2,
        "behind": 0,
        "tie": 1,
    }


#: torchkiln's own round-to-round jitter in the "even" row: the per-round ratio tc/tk is then
#: 1/1.2 twice, 1 three times, 1/0.8 twice: median 1.0, interval [0.83, 1.25]
JITTER = [1.0, 1.2, 0.8, 1.0, 1.2, 0.8, 1.0]


def _row(name: str, tk_factor: float, tc_factor: float, jitter: bool = False) -> Row:
    """A row timed over DRIFT: eager 10 ms, torchkiln and torch.compile ``factor`` of it, and
    torchkiln's rounds also moved by JITTER when ``jitter``."""
    row = Row(name, "zoo", "cpu", "float32", 1, accuracy="pass")
    moved = JITTER if jitter else [1.0] * len(DRIFT)
    times = {
        "eager": [10.0 * d for d in DRIFT],
        "torchkiln": [10.0 * tk_factor * d * j for d, j in zip(DRIFT, moved, strict=True)],
        "inductor": [10.0 * tc_factor * d for d in DRIFT],
    }
    record.record_rounds(row, times)
    return row


def test_a_row_keeps_its_rounds_and_paired_ratios_in_the_json() -> None:
    row = _row("fast", 0.5, 0.6)
    data = json.loads(json.dumps(row.as_dict()))
    assert set(record.ROW_KEYS) <= set(data)
    assert data["rounds_ms"]["eager"] == pytest.approx([10.0 * d for d in DRIFT])
    assert data["round_orders"][:4] == [
        ["eager", "torchkiln", "inductor"],
        ["torchkiln", "inductor", "eager"],
        ["inductor", "eager", "torchkiln"],
        ["inductor", "torchkiln", "eager"],
    ]
    assert len(data["round_orders"]) == len(DRIFT)
    assert set(data["paired"]) == {"speedup", "inductor_speedup", "vs_inductor"}
    for stats in data["paired"].values():
        assert set(stats) == {"median", "low", "high", "confidence", "q1", "q3", "rounds"}
    assert data["speedup"] == pytest.approx(2.0)
    assert data["inductor_speedup"] == pytest.approx(10 / 6)
    assert data["vs_inductor"] == pytest.approx(1.2) and data["verdict"] == "ahead"
    assert data["paired"]["vs_inductor"]["low"] == pytest.approx(1.2)
    # the medians of the timings themselves are still there, and each timing's own spread
    assert data["eager_ms"] == pytest.approx(10.0 * 1.3)
    assert data["spreads"]["eager"]["relative_iqr"] > 1.0
    # without the peer: no head-to-head, no verdict
    alone = Row("alone", "zoo", "cpu", "float32", 1)
    record.record_rounds(alone, {"eager": [2.0, 2.0], "torchkiln": [1.0, 1.0]})
    assert set(alone.paired) == {"speedup"} and alone.verdict is None and alone.vs_inductor is None


def test_the_table_shows_paired_ratios_with_intervals_and_verdicts() -> None:
    rows = [_row("fast", 0.5, 0.6), _row("even", 0.6, 0.6, jitter=True), _row("slow", 0.7, 0.6)]
    assert [r.verdict for r in rows] == ["ahead", "tie", "behind"]
    for width in (60, 100, 120, 160):
        text = table.render(rows, width=width)
        lines = text.splitlines()
        assert max(len(line) for line in lines) <= width
        body = [line.rstrip() for line in lines if line[:1] in "┏┃┡│├└"]
        assert body and all(line[-1] in "┓┃┩│┤┘" for line in body), text
        flat = " ".join(text.split())  # rich wraps the lines under the table at spaces
        assert (
            "ahead on 1, behind on 1, tied on 1 of 3 models; geomean "
            f"{(1.2 * 1.0 * 6 / 7) ** (1 / 3):.2f}x"
        ) in flat
        assert "90% interval" in flat
        # only the jittered row's ratios are wide; drift alone leaves the others exact
        assert "warning: 2 ratio(s) marked !" in flat and "even tk speedup" in flat
        assert "even tk vs tc" in flat and "fast" not in flat.split("warning")[1]
    wide = table.render(rows, width=200)
    header = next(line for line in wide.splitlines() if "model" in line)
    for column in ("eager ms", "tk ms", "tc ms", "tk speedup", "tc speedup", "tk vs tc"):
        assert column in header
    fast = next(line for line in wide.splitlines() if "zoo/fast" in line)
    assert "2.00x" in fast and "1.67x" in fast and "1.20x ahead" in fast
    under_fast = wide.splitlines()[wide.splitlines().index(fast) + 1]
    assert "2.00-2.00" in under_fast and "1.20-1.20" in under_fast and "±" in under_fast
    even = next(line for line in wide.splitlines() if "zoo/even" in line)
    assert "1.00x! tie" in even
    geomean = next(line for line in wide.splitlines() if "geomean" in line)
    assert f"{(2.0 * (1 / 0.6) * (1 / 0.7)) ** (1 / 3):.2f}x" in geomean


def test_a_table_without_the_peer_has_no_head_to_head() -> None:
    row = Row("alone", "zoo", "cpu", "float32", 1, accuracy="pass")
    record.record_rounds(row, {"eager": [2.0, 4.0, 2.0], "torchkiln": [1.0, 2.0, 1.0]})
    text = table.render([row], width=160)
    assert "tk vs tc" not in text and "torchkiln vs torch.compile" not in text
    assert "2.00x" in text
    # 3 rounds cannot reach 90%: the summary of a run with the peer would say so
    assert row.paired["speedup"]["confidence"] == pytest.approx(0.75)


def test_the_summary_says_when_too_few_rounds_reach_no_90_percent() -> None:
    row = Row("short", "zoo", "cpu", "float32", 1, accuracy="pass")
    record.record_rounds(
        row, {"eager": [3.0, 3.0, 3.0], "torchkiln": [1.0, 1.0, 1.0], "inductor": [2.0, 2.0, 2.0]}
    )
    assert row.verdict == "ahead" and row.paired["vs_inductor"]["confidence"] == 0.75
    assert table.versus_summary([row]) == (
        "torchkiln vs torch.compile, median of the per-round time ratios (a tie when its interval "
        "holds 1.0; with 3 rounds that interval has only 75% confidence): ahead on 1, behind on 0, "
        "tied on 0 of 1 models; geomean 2.00x"
    )
