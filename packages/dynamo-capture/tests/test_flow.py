"""bytecode/flow.py: the control-flow graph liveness, break analysis and continuations share."""

from __future__ import annotations

import dis
import sys

import pytest
from torchkiln_dynamo_capture.bytecode import decode, version_table
from torchkiln_dynamo_capture.bytecode.flow import NO_FALLTHROUGH, exits, flow_graph
from torchkiln_dynamo_capture.bytecode.liveness import handler_edges, live_in, successors


def _loops_and_handlers(xs, flag):
    total = 0
    for x in xs:
        try:
            if x is None:
                continue
            total += 1 / x
        except ZeroDivisionError as e:
            total -= 1
            del e
        finally:
            total *= 2
    with open(__file__) as f:
        if flag:
            return f.readline()
    while total > 10:
        total //= 3
    return total


def _straight(a, b):
    c = a + b
    return c * 2


@pytest.mark.parametrize(
    "fn", [_loops_and_handlers, _straight, pytest.param(dis.dis, id="dis.dis")]
)
def test_blocks_partition_the_code_and_end_where_control_leaves(fn):
    code = fn.__code__
    graph = flow_graph(code)
    insts = decode(code)
    assert graph.insts == insts
    starts = [b.start for b in graph.blocks]
    assert starts[0] == 0 and all(a.end == b.start for a, b in zip(graph.blocks, graph.blocks[1:]))
    assert graph.blocks[-1].end == len(insts)
    for b, block in enumerate(graph.blocks):
        assert all(graph.block_of[i] == b for i in range(block.start, block.end))
        # only the last instruction of a block jumps or stops; the others fall through
        for i in range(block.start, block.end - 1):
            assert insts[i].target is None and insts[i].opname not in NO_FALLTHROUGH
        last = insts[block.end - 1]
        want = [graph.block_of[n] for _, n in exits(last) if n < len(insts)]
        assert list(block.successors) == list(dict.fromkeys(want))
    for inst in insts:  # every jump target starts a block
        if inst.target is not None:
            assert inst.target in starts


def test_exception_entries_match_the_table_in_instruction_indices():
    code = _loops_and_handlers.__code__
    graph = flow_graph(code)
    insts = decode(code)
    table = list(dis.Bytecode(code).exception_entries)
    assert len(graph.entries) == len(table) > 0
    for entry, raw in zip(graph.entries, table):
        assert insts[entry.first].offset >= raw.start and insts[entry.end - 1].offset < raw.end
        assert insts[entry.handler].offset == raw.target
        assert (entry.depth, entry.lasti) == (raw.depth, raw.lasti)
        assert graph.handler_depth[entry.handler] == raw.depth
        for i in range(entry.first, entry.end):
            assert graph.covering(i) == entry and graph.handler_of(i) == entry.handler
    # ``except ... as e`` handlers are entered through PUSH_EXC_INFO; cleanups re-raise
    assert any(insts[e.handler].opname == "PUSH_EXC_INFO" for e in graph.entries)
    assert handler_edges(code) == {
        i: e.handler for e in graph.entries for i in range(e.first, e.end)
    }


def test_liveness_reads_the_graph():
    code = _loops_and_handlers.__code__
    live = live_in(code)
    insts = decode(code)
    assert live[0] == {"xs", "flag"}
    ret = max(i for i, inst in enumerate(insts) if inst.opname == "RETURN_VALUE")
    assert "total" in live[ret - 1] and "flag" not in live[ret - 1]
    for i in range(len(insts)):
        assert successors(code, i) == flow_graph(code).successors(i)


def test_version_table_holds_every_difference_flow_and_resume_use():
    for version in ((3, 11), (3, 12)):
        vt = version_table(version)
        assert vt.precall == (version == (3, 11)) == vt.comprehension_frames
        assert vt.load_attr_method_flag == (version == (3, 12))
        assert ("JUMP_BACKWARD", "JUMP_FORWARD") in vt.forward_jumps
    with pytest.raises(NotImplementedError):
        version_table((3, 13))
    assert version_table() == version_table(sys.version_info[:2])
    # the instructions that form one call group with CALL (a break splits before the group)
    assert version_table((3, 11)).call_prefix == {"KW_NAMES", "PRECALL"}
    assert version_table((3, 12)).call_prefix == {"KW_NAMES"}


def _keywords(a, b):
    return dict(a=a, b=b)


def test_decode_resolves_keyword_names_in_every_version():
    def f(x):
        return _keywords(x, b=x + 1)

    kw = [i for i in decode(f.__code__) if i.opname == "KW_NAMES"]
    assert [i.argval for i in kw] == [("b",)]  # 3.11 and 3.12 spell keyword calls with KW_NAMES
    assert f(2) == {"a": 2, "b": 3}
