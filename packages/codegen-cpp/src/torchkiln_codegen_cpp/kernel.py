"""C++ for one ``KernelSpec``: an ops handler that emits CSE'd statements, and the loop nest.

Loop structure (the contract of ``torchkiln_loop_ir.backend``)::

    #pragma omp parallel for collapse(..) if(..)      // over the x-ranges
    for x0 .. for xN {
        // stage "loop" with r-ranges: accumulators, then  for r0 .. { body }, then results
        // stage "epilogue": body once per x
    }

Values live in scopes (the x body, an r-loop body, the body of a ``masked``); a value is only
reused (CSE, store cache) where its scope is visible. A reduction's result, and anything computed
from it, is placed after its r-loop in the x body ("post"), where later stages can see it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
from torchkiln_loop_ir.backend import KernelSpec
from torchkiln_loop_ir.handlers import DefaultHandler
from torchkiln_loop_ir.indexing import index_symbol
from torchkiln_loop_ir.ops import set_ops_handler

from ._pointwise import BOOL_OVERRIDES, POINTWISE
from ._splits import InnermostSplits
from ._status import STATUS_PARAM
from ._values import CppValue, Scope
from .errors import CodegenError, UnsupportedOp
from .loopnest import render_loop_nest
from .options import CppOptions
from .printer import compute_type, constant, print_index, storage_type
from .reductions import RLoop

_HALF_LIKE = {torch.float16: "half", torch.bfloat16: "bf16"}


@dataclass
class _State:
    params: dict[str, str] = field(default_factory=dict)  # buffer name -> C parameter name
    counter: int = 0
    reports_status: bool = False  # the kernel takes a status word (see _status.py)
    has_atomic: bool = False
    # (buffer, index) of each atomic-add store, the memory stores made otherwise, the buffers
    # loaded: what _owned.py needs to run a scatter without atomics
    atomic_stores: list[tuple[str, sympy.Expr]] = field(default_factory=list)
    plain_stores: int = 0
    loaded: set[str] = field(default_factory=set)


class CppOpsHandler(DefaultHandler):
    """The ``ops`` handler that turns one kernel's bodies into C++ statements.

    Install it with ``set_ops_handler`` and call the bodies; ``kernel_source`` does this for a
    whole ``KernelSpec``. Implements every op listed in ``torchkiln_loop_ir.ops``: the pointwise
    ones from the ``POINTWISE`` templates (in ``default``), the others as methods.
    """

    default_ops = frozenset(POINTWISE)

    def __init__(self, kernel: KernelSpec, options: CppOptions | None = None):
        self.kernel = kernel
        self.options = options or CppOptions()
        self.state = _State()
        # a pointwise kernel's values that do not change along its innermost x-loop (a batch
        # norm's per-channel scale over the channel's pixels) are computed once per run of that
        # loop, just outside it (``x_outer``), not once per element: g++ hoists no load past the
        # kernel's stores, which may alias (-fno-strict-aliasing, no restrict)
        self.x_outer: Scope | None = (
            Scope(None)
            if not kernel.rranges and len(kernel.xranges) >= 2 and self.options.simd
            else None
        )
        self.x_scope = Scope(self.x_outer)
        self._stack: list[Scope] = [self.x_scope]
        self._store_cache: dict[tuple[str, str], CppValue] = {}
        self._reduction_cache: dict[tuple[Any, ...], Any] = {}
        self._indirect_cache: dict[tuple[str, str], sympy.Symbol] = {}
        self._indirect_scope: dict[sympy.Symbol, Scope] = {}  # where each indirect index lives
        self._rloop: RLoop | None = None
        self._producers = {n.buffer: n for st in kernel.stages for n in st.nodes}
        self._recomputing: set[str] = set()  # local buffers being recomputed (no memory writes)
        # memory indices touched inside r-loops: the loop nest picks which loop to vectorize
        self.r_indices: list[sympy.Expr] = []
        self.xvars = [index_symbol("x", i) for i in range(len(kernel.xranges))]
        self.rvars = [index_symbol("r", i) for i in range(len(kernel.rranges))]
        self.splits = InnermostSplits(self.xvars[-1] if self.xvars else None)  # cat's masks
        for i, name in enumerate(kernel.args):
            kind = "in_ptr" if name in kernel.inputs else "out_ptr"
            self.state.params[name] = f"{kind}{i}"

    # ---- scopes and emission -------------------------------------------------------------
    def _fresh(self, prefix: str) -> str:
        self.state.counter += 1
        return f"{prefix}{self.state.counter}"

    def _visible(self, scope: Scope | None) -> bool:
        return scope is None or scope in self._stack[-1].chain()

    def _target(self, operands: Sequence[Any]) -> tuple[Scope, RLoop | None]:
        # Only results of the *current* stage's reduction are placed after its r-loop; those of
        # earlier stages are plain x-level values by now.
        if self._rloop is not None and any(
            isinstance(o, CppValue) and o.post is self._rloop for o in operands
        ):
            return self.x_scope, self._rloop
        return self._stack[-1], None

    def _invariant_scope(
        self, operands: Sequence[Any], index: sympy.Expr | None = None
    ) -> Scope | None:
        """The current r-loop's invariant scope when a value of ``operands`` (and memory
        ``index``) is the same in every iteration and is computed directly in the loop body (not
        under a ``masked`` branch, whose mask guards it); else None. Only loops that run at
        least once: a hoisted bounds check must not report an index the loop never reads."""
        loop = self._rloop
        if loop is None or self._stack[-1] is not loop.body:
            return None
        numel = sympy.Mul(*self.kernel.rranges)
        if not (numel.is_Integer and int(numel) > 0):
            return None
        visible = loop.invariant.chain()
        for o in operands:
            if isinstance(o, CppValue) and (
                o.post is loop or (o.scope is not None and o.scope not in visible)
            ):
                return None
        if index is not None:
            for sym in index.free_symbols:
                if sym in self.rvars:
                    return None
                home = self._indirect_scope.get(sym)
                if home is not None and home not in visible:
                    return None
        return loop.invariant

    def _outer_scope(
        self, operands: Sequence[Any], index: sympy.Expr | None, reports: bool
    ) -> Scope | None:
        """``x_outer`` when a value computed directly in the x body (not under a ``masked``
        branch) depends on no variable of the innermost x-loop: its operands are literals or
        values of ``x_outer``, its memory ``index`` (if any) reads no innermost, r or indirect
        variable; else None. A value that may report an error (an integer division by zero)
        moves out only where the innermost loop runs at least once, as it does in eager."""
        outer = self.x_outer
        if outer is None or self._stack[-1] is not self.x_scope:
            return None
        if reports:
            size = sympy.sympify(self.kernel.xranges[-1])
            if not (size.is_Integer and int(size) > 0):
                return None
        for o in operands:
            if isinstance(o, CppValue) and o.scope is not None and o.scope is not outer:
                return None
        if index is not None:
            for sym in index.free_symbols:
                if sym == self.xvars[-1] or sym in self.rvars or sym in self._indirect_scope:
                    return None
        return outer

    def _emit(
        self,
        expr: str,
        dtype: torch.dtype,
        operands: Sequence[Any] = (),
        scope: Scope | None = None,
        index: sympy.Expr | None = None,
        outer: bool = True,
        reports: bool = False,
    ) -> CppValue:
        """A CSE'd statement computing ``expr``: in ``scope`` if given, else where its
        ``operands`` (and memory ``index``) let it live: before the r-loop, outside the
        innermost x-loop (``outer``: allowed), else the current scope."""
        post = None
        if scope is None and operands:
            # an op of values computed before the loop or of literals (an index clamped or
            # wrapped before its gather) is computed there too; its text holds only its operands
            scope = self._invariant_scope(operands)
        if scope is None and outer:
            scope = self._outer_scope(operands, index, reports)
        if scope is None:
            scope, post = self._target(operands)
        for s in scope.chain():
            hit = s.cse.get(expr)
            if hit is not None and hit.dtype == dtype:
                return hit
        name = self._fresh("tmp")
        scope.lines.append(f"{compute_type(dtype)} {name} = {expr};")
        value = CppValue(name, dtype, scope, post)
        scope.cse[expr] = value
        return value

    def _value(self, x: Any, like: torch.dtype | None = None) -> CppValue:
        if isinstance(x, CppValue):
            return x
        if isinstance(x, bool):
            return self.constant(x, torch.bool)
        if isinstance(x, int):
            return self.constant(x, like if like is not None else torch.int64)
        if isinstance(x, float):
            return self.constant(
                x, like if like is not None and like.is_floating_point else torch.float32
            )
        if isinstance(x, sympy.Expr):
            return self.index_expr(x, like if like is not None else torch.int64)
        raise CodegenError(
            f"the C++ backend got an operand it cannot use: {x!r} ({type(x).__name__})"
        )

    # ---- memory ------------------------------------------------------------------------------
    def _param(self, name: str) -> str:
        try:
            return self.state.params[name]
        except KeyError:
            raise CodegenError(
                f"kernel {self.kernel.name} accesses buffer {name!r}, which is neither an input "
                "nor an output of the kernel (nor a local buffer stored earlier at that index)"
            ) from None

    def load(self, name: str, index: sympy.Expr) -> CppValue:
        self.state.loaded.add(name)
        key = (name, str(index))
        cached = self._store_cache.get(key)
        if cached is not None and self._visible(cached.scope):
            return cached
        if name in self.kernel.local_buffers:
            value = self._recompute(name, key)
            if value is not None:
                return value
            raise CodegenError(
                f"kernel {self.kernel.name} loads local buffer {name!r} at {index} before any "
                "visible store at that index"
            )
        dtype = self.kernel.buffers[name].dtype
        if self._rloop is not None:
            self.r_indices.append(index)
        expr = f"{self._param(name)}[{print_index(index)}]"
        if dtype in _HALF_LIKE:
            expr = f"tk_{_HALF_LIKE[dtype]}_to_float({expr})"
        # a buffer this kernel also writes may change along the loop: read it where it is used
        written = name in self.kernel.outputs
        hoist = None if written else self._invariant_scope((), index)
        return self._emit(expr, dtype, scope=hoist, index=index, outer=not written)

    def _recompute(self, name: str, key: tuple[str, str]) -> CppValue | None:
        """Re-run the pointwise node that computes local buffer ``name`` here (its value from an
        earlier r-loop is out of scope), writing no memory; None if that is not possible."""
        node = self._producers.get(name)
        if node is None or node.is_reduction or name in self._recomputing:
            return None
        self._recomputing.add(name)
        try:
            node.body(self.xvars, self.rvars if self._rloop is not None else ())
        finally:
            self._recomputing.discard(name)
        cached = self._store_cache.get(key)
        return cached if cached is not None and self._visible(cached.scope) else None

    def _to_storage(self, name: str, value: CppValue) -> str:
        dtype = self.kernel.buffers[name].dtype
        if dtype in _HALF_LIKE:
            return f"tk_float_to_{_HALF_LIKE[dtype]}(static_cast<float>({value}))"
        return f"static_cast<{storage_type(dtype)}>({value})"

    def store(self, name: str, index: sympy.Expr, value: Any, mode: str | None = None) -> None:
        value = self._value(
            value, self.kernel.buffers[name].dtype if name in self.kernel.buffers else None
        )
        scope, _ = self._target([value])
        self._write(scope, name, index, value, mode)

    def _write(
        self, scope: Scope, name: str, index: sympy.Expr, value: CppValue, mode: str | None
    ) -> None:
        if mode not in (None, "atomic_add"):
            raise CodegenError(f"unknown store mode {mode!r} (expected None or 'atomic_add')")
        if name not in self.kernel.local_buffers and not self._recomputing:
            target = f"{self._param(name)}[{print_index(index)}]"
            if self._rloop is not None:
                self.r_indices.append(index)
            if mode == "atomic_add":
                if self.kernel.buffers[name].dtype in _HALF_LIKE:
                    raise CodegenError(
                        "atomic_add stores to half/bfloat16 buffers are not supported on CPU yet"
                    )
                self.state.has_atomic = True
                self.state.atomic_stores.append((name, index))
                if self._rloop is not None:
                    self._rloop.refuse_simd()
                scope.lines.append("#pragma omp atomic")
                scope.lines.append(f"{target} += {self._to_storage(name, value)};")
            else:
                self.state.plain_stores += 1
                scope.lines.append(f"{target} = {self._to_storage(name, value)};")
        if mode is None:
            self._store_cache[(name, str(index))] = value

    def store_reduction(self, name: str, index: sympy.Expr, value: Any) -> None:
        value = self._value(value)
        self._write(self.x_scope, name, index, value, None)

    def index_expr(self, expr: sympy.Expr, dtype: torch.dtype) -> CppValue:
        value = self._emit(
            f"static_cast<{compute_type(dtype)}>({print_index(expr)})",
            dtype,
            scope=self._invariant_scope((), sympy.sympify(expr)),
            index=sympy.sympify(expr),
        )
        self.splits.note_index(value.expr, expr)
        return value

    def indirect_indexing(self, value: Any, size: Any, check: bool = True) -> sympy.Symbol:
        value = self._value(value)
        check = check and self.options.bounds_check
        key = (value.expr, f"{size}:{check}")
        scope = self._invariant_scope([value]) or self._target([value])[0]
        cached = self._indirect_cache.get(key)
        if cached is not None:
            return cached
        self.state.counter += 1
        sym = index_symbol("i", self.state.counter)
        if check:
            self.state.reports_status = True
            rhs = f"tk_check_index(static_cast<int64_t>({value}), {print_index(size)}, {STATUS_PARAM})"
        else:
            rhs = f"static_cast<int64_t>({value})"
        scope.lines.append(f"int64_t {sym.name} = {rhs};")
        self._indirect_scope[sym] = scope
        if scope is self.x_scope:  # always visible later; deeper scopes are not
            self._indirect_cache[key] = sym
        return sym

    def masked(self, mask: Any, body: Callable[[], Any], other: Any) -> CppValue:
        mask = self._value(mask)
        outer, post = self._target([mask])
        inner = Scope(outer)
        self._stack.append(inner)
        try:
            result = body()
        finally:
            self._stack.pop()
        if isinstance(result, CppValue):
            dtype = result.dtype
        else:
            dtype = torch.float32 if isinstance(result, float) else torch.int64
            result = self._value(result, dtype)
        other_v = self._value(other, dtype)
        name = self._fresh("tmp")
        outer.lines.append(f"{compute_type(dtype)} {name} = {other_v};")
        outer.lines.append(f"if ({mask}) {{")
        outer.lines.extend("  " + ln for ln in inner.lines)
        outer.lines.append(f"  {name} = {result};")
        outer.lines.append("}")
        return CppValue(name, dtype, outer, post)

    # ---- constants and conversion ------------------------------------------------------------
    def constant(self, value: Any, dtype: torch.dtype) -> CppValue:
        return CppValue(constant(value, dtype), dtype, None)

    def to_dtype(
        self, x: Any, dtype: torch.dtype, src_dtype: torch.dtype | None = None, **_: Any
    ) -> CppValue:
        x = self._value(x, src_dtype)
        # an integer becomes a float as +0.0 for 0, whatever GCC folds a round trip into
        from_int = not x.dtype.is_floating_point and x.dtype != torch.bool
        to_float = "tk_int_to_float<float>({})" if from_int else "static_cast<float>({})"
        if dtype in _HALF_LIKE:
            expr = f"tk_round_{_HALF_LIKE[dtype]}({to_float.format(x)})"
        elif dtype == torch.bool:
            expr = f"static_cast<bool>({x})"
        elif not dtype.is_floating_point and x.dtype.is_floating_point:
            expr = f"tk_float_to_int<{compute_type(dtype)}>({x})"  # NaN: x86's INT_MIN, as eager
        elif dtype.is_floating_point and from_int:
            expr = f"tk_int_to_float<{compute_type(dtype)}>({x})"
        else:
            expr = f"static_cast<{compute_type(dtype)}>({x})"
        value = self._emit(expr, dtype, [x])
        self.splits.note_cast(value.expr, x)
        return value

    def to_dtype_bitcast(self, x: Any, dtype: torch.dtype, src_dtype: torch.dtype) -> CppValue:
        x = self._value(x, src_dtype)
        if src_dtype in _HALF_LIKE:
            bits = f"tk_float_to_{_HALF_LIKE[src_dtype]}(static_cast<float>({x}))"
        else:
            bits = f"static_cast<{storage_type(src_dtype)}>({x})"
        if dtype in _HALF_LIKE:
            expr = f"tk_{_HALF_LIKE[dtype]}_to_float(tk_bitcast<uint16_t>({bits}))"
        else:
            expr = f"tk_bitcast<{storage_type(dtype)}>({bits})"
        return self._emit(expr, dtype, [x])

    # ---- random --------------------------------------------------------------------------------
    def load_seed(self, name: str, offset: Any) -> CppValue:
        return self._emit(
            f"static_cast<int64_t>({self._param(name)}[{print_index(offset)}])",
            torch.int64,
            index=sympy.sympify(offset),
        )

    def rand(self, seed: Any, offset: Any) -> CppValue:
        seed, offset = self._value(seed), self._value(offset)
        return self._emit(
            f"tk_rand({seed}, static_cast<int64_t>({offset}))", torch.float32, [seed, offset]
        )

    def randn(self, seed: Any, offset: Any) -> CppValue:
        seed, offset = self._value(seed), self._value(offset)
        return self._emit(
            f"tk_randn({seed}, static_cast<int64_t>({offset}))", torch.float32, [seed, offset]
        )

    def randint64(self, seed: Any, offset: Any, low: Any, high: Any) -> CppValue:
        seed, offset, low, high = (self._value(v) for v in (seed, offset, low, high))
        expr = f"tk_randint64({seed}, static_cast<int64_t>({offset}), {low}, {high})"
        return self._emit(expr, torch.int64, [seed, offset, low, high])

    # ---- reductions ----------------------------------------------------------------------------
    @contextmanager
    def loop_stage(self) -> Iterator[RLoop]:
        """Emit a "loop" stage: its bodies run inside a new r-loop placed in the x body here."""
        loop = RLoop(self.x_scope, self.rvars, self.kernel.rranges, self._fresh)
        self.x_scope.lines.append(loop)
        self._rloop = loop
        self._stack.append(loop.body)
        try:
            yield loop
        finally:
            self._stack.pop()
            self._rloop = None

    def reduction(
        self, dtype: torch.dtype, src_dtype: torch.dtype, reduction_type: str, value: Any
    ) -> Any:
        if self._rloop is None:
            raise CodegenError(
                f"kernel {self.kernel.name}: ops.reduction outside a 'loop' stage of a kernel with "
                "reduction ranges"
            )
        # the same reduction of the same value is computed once per kernel (CSE of reductions)
        if reduction_type == "welford_combine":
            parts = [self._value(v, dtype) for v in value]
            key: tuple[Any, ...] = ("welford_combine", tuple(p.expr for p in parts))
        else:
            value = self._value(value, src_dtype)
            key = (reduction_type, value.expr)
        if key in self._reduction_cache:
            return self._reduction_cache[key]
        if reduction_type == "welford_combine":
            result = self._rloop.welford_combine(self._stack[-1], dtype, parts)
        else:
            result = self._rloop.reduce(self._stack[-1], dtype, reduction_type, value)
        self._reduction_cache[key] = result
        return result

    # ---- pointwise -----------------------------------------------------------------------------
    def default(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CppValue:
        if name not in POINTWISE or kwargs:
            raise UnsupportedOp(f"the C++ backend has no op {name!r} (see torchkiln_loop_ir.ops)")
        return self._pointwise(name, args)

    def __getattr__(self, name: str) -> Any:
        # only reached for names that are no op of the table (a body's typo): a typed error
        # that is also an AttributeError, so ``hasattr`` answers False
        if name.startswith("_"):
            raise AttributeError(name)
        raise UnsupportedOp(f"the C++ backend has no op {name!r} (see torchkiln_loop_ir.ops)")

    def _pointwise(self, name: str, args: Sequence[Any]) -> CppValue:
        float_t, int_t, kind = POINTWISE[name]
        like = next(
            (a.dtype for a in args if isinstance(a, CppValue) and a.dtype != torch.bool), None
        )
        if like is None:
            like = next((a.dtype for a in args if isinstance(a, CppValue)), None)
        vals = [self._value(a, like) for a in args]
        first = vals[1] if kind == "second" else vals[0]
        dtype = torch.bool if kind == "bool" else first.dtype
        src = vals[1].dtype if name == "where" else vals[0].dtype
        template = float_t if src.is_floating_point else int_t
        if name in _INT_DIVISIONS and not src.is_floating_point:
            # a zero divisor sets a bit of the call's status word, which the launcher raises
            self.state.reports_status = True
        if src == torch.bool and name in BOOL_OVERRIDES:
            template = BOOL_OVERRIDES[name]
        expr = template.format(*vals, T=compute_type(src))
        if len(vals) == 2:
            self.splits.note_compare(name, *vals)
        reports = name in _INT_DIVISIONS and not src.is_floating_point
        return self._emit(expr, dtype, vals, reports=reports)


# Integer ops that raise ZeroDivisionError in eager on a zero divisor (see _status.py).
_INT_DIVISIONS = frozenset({"floordiv", "remainder", "fmod", "mod"})


def c_name(name: str) -> str:
    """A C identifier for a kernel name; the prefix keeps clear of C++ keywords, libm's names
    (a kernel called ``sin``) and the prelude's ``tk_`` helpers."""
    return "kernel_" + re.sub(r"\W", "_", name)


@dataclass(frozen=True)
class GeneratedKernel:
    """The C++ of one kernel and what calling it needs."""

    name: str  # the C symbol
    source: str
    num_buffers: int
    num_sizes: int
    reports_status: bool  # a last parameter ``int64_t* tk_status`` follows the sizes


def generate_kernel(
    kernel: KernelSpec, options: CppOptions | None = None, *, symbol: str | None = None
) -> GeneratedKernel:
    """Generate the ``extern "C"`` function for ``kernel`` (no compiling)."""
    options = options or CppOptions()
    # abstract to mypy only: the ops are set on DefaultHandler at import (handlers.py)
    handler = CppOpsHandler(kernel, options)  # type: ignore[abstract]
    with set_ops_handler(handler):
        for stage in kernel.stages:
            if stage.kind == "loop" and kernel.rranges:
                with handler.loop_stage():
                    for node in stage.nodes:
                        node.body(handler.xvars, handler.rvars)
            elif stage.kind in ("loop", "epilogue"):
                for node in stage.nodes:
                    node.body(handler.xvars, handler.rvars if stage.kind == "loop" else ())
            else:
                raise CodegenError(f"unknown stage kind {stage.kind!r} in kernel {kernel.name}")
    symbol = symbol or c_name(kernel.name)
    return GeneratedKernel(
        symbol,
        render_loop_nest(kernel, handler, symbol, options),
        len(kernel.args),
        len(kernel.size_args),
        handler.state.reports_status,
    )


def kernel_source(kernel: KernelSpec, options: CppOptions | None = None) -> str:
    """The C++ function generated for ``kernel``, without compiling it."""
    return generate_kernel(kernel, options).source


__all__ = [
    "CppOpsHandler",
    "CppValue",
    "GeneratedKernel",
    "c_name",
    "generate_kernel",
    "kernel_source",
]
