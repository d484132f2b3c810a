"""print() and logging calls between tensor operations: each print is a break; logging calls and
warnings.warn run after the graph instead (no break, like TorchDynamo's reorderable logging
functions); output order must hold either way.

Graph counts follow the rule in README.md: the tensor operations of one call, cut at every break,
one graph per piece that holds at least one tensor operation.
"""

from __future__ import annotations

import builtins
import logging
import sys
import warnings

import torch
from _breaks_harness import program, xy34

_STATE = {"count": 0}


def _reset_count():
    _STATE["count"] = 0


@program(graphs=2)
def print_middle(x):
    y = x.sin()
    print("middle")
    return y.cos()


@program(graphs=1)
def print_first_statement(x):
    print("start")
    return x * 2


@program(graphs=1)
def print_last_statement(x):
    y = x * 2
    print("end")
    return y


@program(graphs=2)
def print_tensor_value(x):
    y = x + 1
    print(y)
    return y * 2


@program(graphs=2)
def print_two_in_a_row(x):
    y = x + 1
    print("a")
    print("b")
    return y - 1


@program(graphs=3)
def print_three_segments(x):
    a = x * 2
    print(1)
    b = a + 1
    print(2)
    return b.relu()


@program(graphs=2)
def print_shape_and_dtype(x):
    y = x * 2
    print(x.shape, y.dtype, y.requires_grad)
    return y + 1


@program(graphs=2)
def print_sep_end_kwargs(x):
    y = x + 1
    print("a", "b", sep="-", end="!\n")
    return y * 3


@program(graphs=2)
def print_end_empty_then_newline(x):
    y = x.exp()
    print("no newline", end="")
    print(" then newline")
    return y.log()


@program(graphs=1)
def print_result_is_none(x):
    r = print("x")
    return x * 2 if r is None else x * 3


@program(graphs=2, inputs=xy34)
def print_between_two_inputs(x, y):
    a = x @ y.t()
    print("matmul done")
    return a.softmax(-1), y.sum()


@program(graphs=2)
def print_returns_tuple(x):
    a = x + 1
    print()
    b = a * a
    return a, b


@program(graphs=2)
def print_fstring_of_shape(x):
    y = x.transpose(0, 1)
    print(f"shape={tuple(y.shape)} numel={y.numel()}")
    return y.contiguous() * 2


@program(graphs=2)
def print_via_builtins_module(x):
    y = x.tanh()
    builtins.print("via builtins")
    return y * y


@program(graphs=2)
def print_via_lambda(x):
    say = lambda m: print(m)  # noqa: E731 - the lambda is what is captured
    y = x + 1
    say("lambda")
    return y * 2


@program(graphs=2, setup=_reset_count, observe=lambda: dict(_STATE))
def print_after_global_dict_update(x):
    _STATE["count"] += 1
    y = x * _STATE["count"]
    print("count", _STATE["count"])
    return y + _STATE["count"]


@program(graphs=2, inputs=lambda: (torch.randn(3, 4), True))
def print_under_python_flag_true(x, verbose):
    y = x * 2
    if verbose:
        print("verbose")
    return y + 1


@program(graphs=1, inputs=lambda: (torch.randn(3, 4), False), name="print_under_python_flag_false")
def _print_under_python_flag_false(x, verbose):
    y = x * 2
    if verbose:
        print("verbose")
    return y + 1


@program(graphs=2)
def print_in_place_update(x):
    x.add_(1)
    print("added")
    x.mul_(2)
    return x.sum()


@program(graphs=4)
def print_four_times(x):
    print("a")
    x = x + 1
    print("b")
    x = x * 2
    print("c")
    x = x - 3
    print("d")
    return x.abs()


@program(graphs=1)
def print_list_of_python_values(x):
    y = x.mean(0)
    print([1, 2.5, "s", None, (3, 4)], {"k": [1]})
    return y


# ----------------------------------------------------------------------------- logging


class _StdoutHandler(logging.Handler):
    """Writes to the current sys.stdout, so the harness sees log lines in order with prints."""

    def emit(self, record):
        sys.stdout.write(f"{record.levelname}:{record.name}:{record.getMessage()}\n")


_LOG = logging.getLogger("torchkiln_tests.breaks")
_LOG.setLevel(logging.DEBUG)
_LOG.propagate = False
_LOG.addHandler(_StdoutHandler())


@program(graphs=1)
def logging_info_middle(x):
    y = x.sigmoid()
    _LOG.info("sigmoid done")
    return y * 4


@program(graphs=1)
def logging_with_args(x):
    y = x * 2
    _LOG.warning("shape %s sum is a %s", tuple(y.shape), type(y).__name__)
    return y.sum(0)


@program(graphs=2)
def logging_and_print_interleaved(x):
    y = x + 1
    _LOG.debug("first")
    print("second")
    z = y * 2
    _LOG.error("third")
    return z.relu() + y


@program(graphs=2)
def logging_get_logger_inside(x):
    y = x.cos()
    logging.getLogger("torchkiln_tests.breaks").info("inside")
    return y + 1


@program(graphs=1)
def warnings_warn_between_ops(x):
    y = x * 2
    warnings.warn("careful: doubled", UserWarning, stacklevel=1)
    return y + 1


@program(graphs=2)
def warnings_and_prints_interleaved(x):
    print("one")
    y = x.exp()
    warnings.warn("two", RuntimeWarning, stacklevel=1)
    z = y.log()
    print("three")
    return z * y
