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

_CORPUS = (
    Path(__file__).resolve().parents[1] / "packages" / "dynamo-capture" / "tests" / "conformance"
)
if str(_CORPUS) not in sys.path:
    sys.path.insert(0, str(_CORPUS))

import test_higher_order_ops as hops  # noqa: E402 - after the corpus folder is on sys.path
import test_python_features_more as more  # noqa: E402 - after the corpus folder is on sys.path
import test_scalar_outputs as scalars  # noqa: E402 - after the corpus folder is on sys.path
from _conformance_harness import assert_same  # noqa: E402 - after the corpus folder is on sys.path

#: program -> the reason its graph is refused below capture (the rest compile in strict mode)
REFUSED = {
    "WhileModule": "autograd through while_loop",
    **{
        name: "kernels take integer sizes only"
        for name in (
            "item_scale",
            "item_arithmetic",
            "item_returned",
            "tolist_unpack",
            "tolist_2d",
            "item_bool",
            "item_in_comprehension",
            "item_to_module_free_tensor",
        )
    },
}
CASES = [(p, {}) for p in hops.PROGRAMS + more.PROGRAMS] + [
    (p, {"capture_scalar_outputs": True}) for p in scalars.PROGRAMS
]


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


_BREAKS = _CORPUS.parent / "breaks"
if str(_BREAKS) not in sys.path:
    sys.path.insert(0, str(_BREAKS))

import breaks_with_try as with_try  # noqa: E402 - after the corpus folder is on sys.path

#: autocast blocks open at a graph break -> (graphs, breaks), as TorchDynamo splits them
AUTOCAST_BREAKS = {
    "autocast_block_with_break": (2, 1),
    "autocast_block_with_two_breaks": (3, 2),
    "nested_autocast_blocks_with_break": (2, 1),
    "autocast_inside_no_grad_with_break_and_return": (2, 1),
}


def _autocast_depth() -> int:
    depth = torch.autocast_increment_nesting() - 1
    torch.autocast_decrement_nesting()
    return depth


@pytest.mark.parametrize("name", list(AUTOCAST_BREAKS))
def test_autocast_block_open_at_a_break_end_to_end(name, capsys):
    """The block is handed to Python between the graphs (it ran the whole function eagerly):
    each graph compiled in strict mode, bfloat16 where eager computes in bfloat16, the prints see
    the block open, and the process's autocast state and nesting are as before after the call."""
    fn = getattr(with_try, name)
    compiled = torchkiln.compile(fn, options={"strict": True})
    for _ in range(2):
        x = torch.randn(4, 4, requires_grad="grad" in name)
        expected = fn(x)
        eager_out = capsys.readouterr().out
        actual = compiled(x)
        assert capsys.readouterr().out == eager_out
        assert_same(actual, expected, rtol=1e-2, atol=1e-2)  # bfloat16 matrix products
        assert (
            not torch.is_autocast_enabled("cpu")
            and _autocast_depth() == 0
            and torch.is_grad_enabled()
        )
    report = torchkiln.report(compiled)
    graphs, breaks = AUTOCAST_BREAKS[name]
    assert (report.num_graphs, len(report.graph_breaks)) == (
        graphs,
        breaks,
    ) and not report.eager_fallbacks, report
