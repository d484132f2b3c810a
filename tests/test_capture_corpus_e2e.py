"""The control-flow, scalar-output and more-Python-features programs of dynamo-capture's
conformance corpus, compiled
end to end (aot-partition, loop-ir, C++) in strict mode: results and side effects equal eager's
on fresh inputs, in the graph count capture promises. Where a lower layer refuses a graph on
purpose (float ``.item()`` values, autograd through ``while_loop``), the refusal is the
documented one, and non-strict mode runs that graph eagerly with correct results."""

from __future__ import annotations

import copy
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torchkiln
from torchkiln.errors import BackendCompilerFailed

_CORPUS = Path(__file__).resolve().parents[1] / "packages" / "dynamo-capture" / "tests" / "conformance"
if str(_CORPUS) not in sys.path:
    sys.path.insert(0, str(_CORPUS))

import test_higher_order_ops as hops  # noqa: E402 - after the corpus folder is on sys.path
import test_python_features_more as more  # noqa: E402 - after the corpus folder is on sys.path
import test_scalar_outputs as scalars  # noqa: E402 - after the corpus folder is on sys.path
from _conformance_harness import assert_same  # noqa: E402 - after the corpus folder is on sys.path

#: program -> the reason its graph is refused below capture (the rest compile in strict mode)
REFUSED = {
    "WhileModule": "autograd through while_loop",
    **{name: "kernels take integer sizes only" for name in (
        "item_scale", "item_arithmetic", "item_returned", "tolist_unpack", "tolist_2d", "item_bool",
        "item_in_comprehension", "item_to_module_free_tensor")},
}
CASES = ([(p, {}) for p in hops.PROGRAMS + more.PROGRAMS]
         + [(p, {"capture_scalar_outputs": True}) for p in scalars.PROGRAMS])


def _check(program, compiled) -> None:
    for _ in range(2):
        inputs = program.make_inputs()
        mine, theirs = copy.deepcopy(inputs), copy.deepcopy(inputs)
        if program.setup:
            program.setup()
        want = program.fn(*theirs)
        want_state = program.observe() if program.observe else None
        if program.setup:
            program.setup()
        got = compiled(*mine)
        assert_same(got, want, rtol=1e-4, atol=1e-5)
        assert_same(mine, theirs, rtol=1e-4, atol=1e-5, where="mutated args")
        if program.observe:
            assert program.observe() == want_state


@pytest.mark.parametrize(("program", "options"), CASES, ids=[p.id for p, _ in CASES])
def test_corpus_program_end_to_end(program, options):
    torch.manual_seed(0)
    reason = REFUSED.get(program.id)
    strict = torchkiln.compile(program.fn, options={**options, "strict": True})
    if reason is None:
        _check(program, strict)
        report = torchkiln.report(strict)
        assert len(report.graphs) == program.graphs and not report.eager_fallbacks
        return
    with pytest.raises(BackendCompilerFailed, match=reason):
        _check(program, strict)
    lenient = torchkiln.compile(program.fn, options=options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _check(program, lenient)
    assert [reason in f.reason for f in torchkiln.report(lenient).eager_fallbacks] == [True]
