"""The numpy conformance tests' harness (test_numpy_traced.py, test_numpy_table.py,
test_numpy_table_entries.py): a program record, eager numpy's result compared
exactly (Python type, dtype, shape; values close), and ``run_numpy_program``, which runs a program
eagerly and captured on three calls with fresh random inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from _conformance_harness import RecordingBackend
from torchkiln_dynamo_capture import capture


@dataclass(frozen=True)
class NumpyProgram:
    fn: object
    inputs: object
    graphs: int
    numpy_nodes: int = 0  # at least this many numpy nodes in the graphs (0: not checked)

    @property
    def id(self) -> str:
        return self.fn.__name__


def assert_same_numpy(actual, expected, where="out"):
    """Eager numpy's result exactly: Python type, dtype, shape; values close."""
    assert type(actual) is type(expected), (
        f"{where}: {type(actual).__name__} != {type(expected).__name__}"
    )
    if isinstance(expected, (np.ndarray, np.generic)):
        assert actual.dtype == expected.dtype, f"{where}: dtype {actual.dtype} != {expected.dtype}"
        assert np.shape(actual) == np.shape(expected), (
            f"{where}: shape {np.shape(actual)} != {np.shape(expected)}"
        )
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6, err_msg=where)
    elif isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual, expected, msg=lambda m: f"{where}: {m}")
    elif isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected), f"{where}: length differs"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same_numpy(a, e, f"{where}[{i}]")
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


def numpy_nodes(graphs) -> int:
    """How many numpy nodes (targets from variables/numpy_nodes.py) ``graphs`` hold."""
    return sum(
        1
        for gm in graphs
        for n in gm.graph.nodes
        if n.op == "call_function" and getattr(n.target, "__module__", "").endswith("numpy_nodes")
    )


def _eager(p: NumpyProgram, args):
    """Eager's result on copies of ``args`` (the captured call gets the originals)."""
    return p.fn(*[a.copy() if isinstance(a, np.ndarray) else a.clone() for a in args])


def run_numpy_program(p: NumpyProgram) -> None:
    """``p`` eagerly and captured on three calls with fresh random inputs: eager's results
    (``assert_same_numpy``), ``p.graphs`` graphs on the first call and none after, at least
    ``p.numpy_nodes`` numpy nodes in them; with one graph, ``fullgraph=True`` too (no break)."""
    backend = RecordingBackend()
    compiled = capture(p.fn, backend)
    torch.manual_seed(0)
    np.random.seed(0)
    for tag in ("first call", "second call", "third call"):
        args = p.inputs()
        expected = _eager(p, args)
        assert_same_numpy(compiled(*args), expected, tag)
        assert len(backend.graphs) == p.graphs, (
            f"{tag}: {len(backend.graphs)} graphs, expected {p.graphs}"
        )
    if p.numpy_nodes:
        assert numpy_nodes(backend.graphs) >= p.numpy_nodes, [gm.code for gm in backend.graphs]
    if p.graphs == 1:  # one graph and no break (a break before any op compiles no graph)
        args = p.inputs()
        expected = _eager(p, args)
        assert_same_numpy(
            capture(p.fn, RecordingBackend(), fullgraph=True)(*args), expected, "full"
        )
