"""Breaks inside ``with torch.no_grad()/enable_grad()/set_grad_enabled`` and try/except/finally.

Grad mode must be right after the break and restored after the block (``grad=True`` programs also
compare input gradients). Exceptions raised by code that runs eagerly after a break (``.item()``
of a many-element tensor, ``int(nan)``, numpy) must reach the user's ``except`` as in eager; the
clause body and the code after the try statement are captured again (graphs are counted there).
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from _breaks_harness import g34, program, register


@program(graphs=2, inputs=g34, grad=True)
def no_grad_block_with_break(x):
    y = x * 2
    with torch.no_grad():
        z = y + 1
        print("in no_grad")
        w = z * 3
    return y + w, w


@program(graphs=3, inputs=g34, grad=True)
def grad_mode_printed_inside_and_after(x):
    with torch.no_grad():
        a = x * 2
        print(torch.is_grad_enabled())
        b = a + 1
    print(torch.is_grad_enabled())
    return b * x


@program(graphs=2, inputs=g34, grad=True)
def enable_grad_inside_no_grad(x):
    with torch.no_grad():
        with torch.enable_grad():
            y = x * 2
            print("enable_grad", torch.is_grad_enabled())
            z = y * y
        u = z + 1
    return z, u


@program(graphs=2, inputs=g34, grad=True)
def set_grad_enabled_false_block(x):
    with torch.set_grad_enabled(False):
        y = x.exp()
        print("set_grad_enabled(False)")
        z = y + x
    return z, x * 2


@program(graphs=2, inputs=g34, grad=True)
def grad_mode_restored_after_block(x):
    with torch.no_grad():
        y = x + 1
        print("inside")
    z = x * y
    print(z.requires_grad)
    return z


@program(graphs=3, inputs=g34, grad=True)
def no_grad_in_loop_with_break(x):
    acc = x * 1
    for i in range(2):
        with torch.no_grad():
            print("iteration", i)
            acc = acc + 1
    return acc * x


@program(graphs=3, inputs=g34, grad=True)
def break_in_block_then_break_after(x):
    with torch.no_grad():
        s = x.sum()
        print("s computed")
    y = x * s
    print("y computed", y.requires_grad)
    return y.sin()


@program(graphs=2)
def except_catches_item_error(x):
    y = x + 1
    try:
        v = y.item()
    except RuntimeError:
        v = -1.0
    return y * 2, v


@program(graphs=2)
def except_keeps_the_message(x):
    y = x + 1
    try:
        y.item()
    except RuntimeError as e:
        msg = str(e)
    return y * 2, msg


@program(graphs=3)
def try_finally_with_break_in_body(x):
    try:
        y = x * 2
        print("body")
        z = y + 1
    finally:
        print("finally")
    return z * 2


@program(graphs=2)
def try_except_else_with_break(x):
    x = x.abs()
    try:
        print("try")
        a = x + 1
    except ValueError:
        a = x - 1
    else:
        a = a * 2
    return a


def _bad(t):
    print("bad", tuple(t.shape))
    raise KeyError("k")


@program(graphs=2)
def exception_from_breaking_callee_is_caught(x):
    y = x * 2
    try:
        _bad(y)
    except KeyError as e:
        y = y + 1
        print("caught", repr(e))
    return y


@program(graphs=1, raises=RuntimeError)
def exception_propagates_out_after_break(x):
    y = x + 1
    print("before")
    return y.item()


@program(graphs=2)
def except_catches_int_of_nan(x):
    t = (x * float("nan")).sum()
    try:
        n = int(t)
    except ValueError as e:
        n = len(str(e))
    return x + n


@program(graphs=2)
def except_catches_numpy_error(x):
    y = x.relu()
    try:
        np.asarray(y).reshape(5)
        ok = True
    except ValueError:
        ok = False
    return y * 2 if not ok else y, ok


@program(graphs=1, raises=RuntimeError)
def finally_runs_when_break_raises(x):
    try:
        y = x * 2
        print("try")
        return y.item()
    finally:
        print("finally")


@program(graphs=1)
def except_handler_returns(x):
    try:
        print("try")
        n = int(x)
    except (TypeError, ValueError, RuntimeError) as e:
        return x * 2, type(e).__name__
    return x * n, "none"


@program(graphs=4)
def try_in_loop_with_raise_after_break(x):
    for i in range(3):
        y = x * i
        try:
            print(i)
            if i == 1:
                raise ValueError(i)
        except ValueError:
            y = y + 100
        x = x + y
    return x


# an except clause the raising instruction reaches through a clause that does not match; its body
# catches a second exception raised after a break inside it. Pieces: [x+1] | .item() | [y*3] |
# int() | [y-n, y*v]
@program(graphs=3)
def nested_try_outer_clause_catches(x):
    y = x + 1
    try:
        try:
            v = y.item()
        except ValueError:
            v = 0.0
        y = y * 100
    except RuntimeError:
        y = y * 3
        try:
            n = int(y)
        except ValueError as e:
            n = len(str(e))
        y = y - n
        v = -1.0
    return y * v


# the try region's stack holds the no_grad block's exit: the clause body and what follows run in
# the block (leaving it is not a cut). Pieces: [x*2] | int() | [y*n, z+x]
@program(graphs=2, inputs=g34, grad=True)
def try_inside_no_grad_block(x):
    y = x * 2
    with torch.no_grad():
        try:
            n = int(y)
        except ValueError:
            n = 3
        z = y * n
    return z + x, torch.is_grad_enabled()


# ``as e`` is deleted when the clause ends: a copy of it is used after. Pieces: [relu] | .item() | [y+n]
@program(graphs=2)
def except_binding_kept_after_the_handler(x):
    y = x.relu()
    try:
        y.item()
        err = None
    except RuntimeError as e:
        err = e
    kind = type(err).__name__
    return y + len(kind), kind, str(err)[:8]


# once the clause is left, no exception is being handled any more (what Python after it sees).
# Pieces: [x-1] | .item() | print | [y*2]
@program(graphs=2)
def handled_exception_cleared_after_the_handler(x):
    y = x - 1
    try:
        y.item()
    except RuntimeError:
        pass
    print("after the handler", sys.exc_info()[0])
    return y * 2


class _Tracer:
    def __init__(self, name):
        self.name = name

    def __enter__(self):
        print("enter", self.name)
        return self

    def __exit__(self, *exc):
        print("exit", self.name)
        return False


@program(graphs=3)
def user_context_manager_that_prints(x):
    y = x + 1
    with _Tracer("block"):
        z = y * 2
    return z - 1


@program(graphs=3, inputs=g34, grad=True)
def no_grad_decorated_callee_breaks(x):
    y = _no_grad_helper(x)
    return y + x


@torch.no_grad()
def _no_grad_helper(t):
    u = t * 3
    print("helper grad", torch.is_grad_enabled())
    return u + 1


@program(graphs=2, inputs=lambda: (torch.randn(4, 4),))
def autocast_block_with_break(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ x.t()
        print("autocast", torch.is_autocast_enabled("cpu"), y.dtype)
        z = y @ x
    return z, z.float() + 1


def _autocast_depth():
    depth = torch.autocast_increment_nesting() - 1
    torch.autocast_decrement_nesting()
    return depth


# [x @ x.t()] | [y @ x] | [z @ z, float + 1]: the block stays open in Python across both breaks
@program(graphs=3, inputs=lambda: (torch.randn(4, 4),))
def autocast_block_with_two_breaks(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ x.t()
        print("first", torch.get_autocast_dtype("cpu"), _autocast_depth())
        z = y @ x
        print("second", torch.is_autocast_enabled("cpu"), z.dtype)
        w = z @ z
    return w, w.float() + 1, torch.is_autocast_enabled("cpu"), _autocast_depth()


# the inner block disables autocast: [mm in bf16, inner mm in fp32] | [mm in bf16] | [add]
@program(graphs=2, inputs=lambda: (torch.randn(4, 4),))
def nested_autocast_blocks_with_break(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = x @ x
        with torch.autocast("cpu", enabled=False):
            b = x @ x
            print("inner", torch.is_autocast_enabled("cpu"), b.dtype, _autocast_depth())
            c = b @ x
        d = a @ a
    return c, d, d.float() + c, _autocast_depth()


@program(graphs=2, inputs=g34, grad=True)
def autocast_inside_no_grad_with_break_and_return(x):
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ x.t()
            print("inside", torch.is_grad_enabled(), torch.is_autocast_enabled("cpu"))
            return y @ x, x * 2


@program(graphs=2, inputs=g34, grad=True)
def return_from_inside_no_grad_after_break(x):
    with torch.no_grad():
        y = x * 2
        print("returning from inside the block")
        return y + 1, torch.is_grad_enabled()


@program(graphs=1, raises=RuntimeError)
def shape_error_in_continuation(x):
    y = x + 1
    print("about to fail")
    return y @ y


@program(graphs=2, inputs=g34, grad=True)
def return_from_inside_enable_grad_inside_no_grad(x):
    with torch.no_grad(), torch.enable_grad():
        y = x * 2
        print("inner")
        return y * y


@torch.no_grad()
def _decorated_top_level(x):
    y = x * 2
    print("decorated", torch.is_grad_enabled())
    return y + 1


register(
    lambda: _decorated_top_level,
    graphs=2,
    inputs=g34,
    grad=True,
    name="top_level_function_decorated_with_no_grad",
    kind="with_try",
)
