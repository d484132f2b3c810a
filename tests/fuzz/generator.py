"""A seeded random-program generator over the ops loop-ir lowers.

``generate(seed)`` returns a ``Program``: the Python source of one function ``f(x0, x1, ...)``
built from a random chain of statements (pointwise math, comparisons, where, reductions with
dims/keepdim, views, cat, indexing/gather, matmul, softmax/layer_norm, dtype casts, tensor
constants, in-place ops on intermediates and on inputs), and the recipes of its inputs (shape,
dtype, memory layout: contiguous, transposed or sliced with a step). The generator tracks every
value's shape and dtype so that most programs are valid; the ones that are not must raise the
same exception type eagerly and compiled, which is a test too.

Programs are plain source text so that a failure is reproduced by reading it: ``Program.source``.
Float dtypes are spelled ``D.float32`` etc. so that the oracle can run the same program in float64
(``D`` bound to a namespace mapping every float dtype to float64) as the reference.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass

import torch

from .program import InputSpec, Program

#: bumped when the same seed draws another program (results files record it): 2 added negative
#: and out-of-range slice bounds; 3 added training (gradients) and graph breaks, drawn from a
#: second random stream after the program: with both shares 0 a seed draws version 2's program;
#: 4 trains no program whose max pool has a window without a tap inside (eager's backward writes
#: out of bounds there: ``_window_without_taps``), a change only where ``pool_share`` is not 0
GENERATOR_VERSION = 4
SIZES = (0, 1, 1, 2, 3, 3, 4, 5, 7)  # 0, 1 and odd sizes are the interesting ones
FLOATS = ("float32", "float32", "float32", "float64")
LOW_FLOATS = ("float16", "bfloat16")  # CPU kernels exist for both in eager; rarer
DTYPES = FLOATS + ("int64", "bool")


@dataclass
class Value:
    name: str
    shape: tuple[int, ...]
    dtype: str
    is_input: bool = False
    view_of_input: bool = False  # writing into it writes an input
    expanded: bool = False  # an expand view: in-place writes into it are an error

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_float(self) -> bool:
        return self.dtype in ("float32", "float64", "float16", "bfloat16")


def _promote(a: str, b: str) -> str:
    return str(torch.promote_types(getattr(torch, a), getattr(torch, b))).replace("torch.", "")


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    try:
        return tuple(torch.broadcast_shapes(a, b))
    except RuntimeError:
        return None


class _Builder:
    """One program under construction: its values, statements and inputs."""

    def __init__(self, rng: random.Random, seed: int) -> None:
        self.rng = rng
        self.seed = seed
        self.inputs: list[InputSpec] = []
        self.values: list[Value] = []
        self.lines: list[str] = []
        self.mutated: set[int] = set()
        #: a max pool drawn with a window that has no tap inside its input (see ``st_pool``)
        self.pool_without_taps = False
        self._n = 0

    # -- inputs -------------------------------------------------------------------------------
    def shape(self, max_rank: int = 3) -> tuple[int, ...]:
        rank = self.rng.choice([r for r in (0, 1, 1, 2, 2, 2, 3, 3) if r <= max_rank])
        return tuple(self.rng.choice(SIZES) for _ in range(rank))

    def dtype(self) -> str:
        if self.rng.random() < 0.06:
            return self.rng.choice(LOW_FLOATS)
        return self.rng.choice(DTYPES)

    def add_input(
        self,
        shape: tuple[int, ...],
        dtype: str,
        index_high: int | None = None,
        *,
        buffer: bool = False,
        layout: str | None = None,
    ) -> Value:
        layouts = ["contiguous"] * 3
        if len(shape) >= 1:
            layouts.append("strided")
        if len(shape) >= 2:
            layouts.append("transposed")
        drawn = (
            "contiguous"
            if index_high is not None and self.rng.random() < 0.7
            else self.rng.choice(layouts)
        )
        layout = layout or drawn
        self.inputs.append(InputSpec(shape, dtype, layout, index_high, buffer=buffer))
        v = Value(f"x{len(self.inputs) - 1}", shape, dtype, is_input=True, view_of_input=True)
        self.values.append(v)
        return v

    def new(
        self, expr: str, shape, dtype: str, *, view_of: Value | None = None, expanded: bool = False
    ) -> Value:
        name = f"t{self._n}"
        self._n += 1
        self.lines.append(f"{name} = {expr}")
        v = Value(
            name,
            tuple(shape),
            dtype,
            view_of_input=bool(view_of and view_of.view_of_input),
            expanded=expanded or bool(view_of and view_of.expanded),
        )
        self.values.append(v)
        return v

    def pick(self, pred=lambda v: True) -> Value | None:
        # recent values are likelier: chains rather than a fan of one-op programs
        cands = [v for v in self.values if pred(v)]
        if not cands:
            return None
        weights = [1 + i for i in range(len(cands))]
        return self.rng.choices(cands, weights)[0]

    def scalar(self, dtype: str) -> str:
        if dtype == "bool":
            return self.rng.choice(["True", "False"])
        if dtype == "int64":
            return str(self.rng.choice([1, 2, 3, -2]))
        return str(self.rng.choice([0.5, 2.0, -1.5, 3.0, 1e-3]))


# -- statements ---------------------------------------------------------------------------------
# Each takes the builder and returns True when it added a statement.

UNARY_FLOAT = [
    "torch.sin({a})",
    "torch.exp({a}.clamp(max=8))",
    "{a}.abs()",
    "-{a}",
    "torch.sigmoid({a})",
    "torch.tanh({a})",
    "torch.relu({a})",
    "torch.sqrt({a}.abs())",
    "torch.log({a}.abs() + 1)",
    "{a} * {a}",
    "torch.floor({a})",
    "torch.cos({a})",
    "torch.rsqrt({a}.abs() + 0.5)",
    "torch.erf({a})",
    "{a}.clamp(-0.5, 0.5)",
    "torch.nn.functional.gelu({a})",
    "torch.nn.functional.silu({a})",
]
UNARY_INT = ["{a}.abs()", "-{a}", "{a} * {a}", "{a}.clamp(min=-2)", "torch.bitwise_not({a})"]
UNARY_BOOL = ["~{a}", "torch.logical_not({a})"]
BINARY = [
    "{a} + {b}",
    "{a} - {b}",
    "{a} * {b}",
    "torch.maximum({a}, {b})",
    "torch.minimum({a}, {b})",
    "{a} / {b}",
]
COMPARE = ["{a} < {b}", "{a} > {b}", "{a} == {b}", "{a} != {b}", "{a} >= {b}"]


def st_unary(b: _Builder) -> bool:
    a = b.pick()
    if a is None:
        return False
    table = UNARY_FLOAT if a.is_float else UNARY_INT if a.dtype == "int64" else UNARY_BOOL
    b.new(b.rng.choice(table).format(a=a.name), a.shape, a.dtype)
    return True


def _partner(b: _Builder, a: Value) -> tuple[str, tuple[int, ...], str]:
    """Another value broadcastable with ``a``, or a scalar: (source, shape, dtype)."""
    if b.rng.random() < 0.7:
        other = b.pick(lambda v: v is not a and _broadcast(a.shape, v.shape) is not None)
        if other is not None:
            return other.name, _broadcast(a.shape, other.shape), other.dtype
    return b.scalar(a.dtype), a.shape, a.dtype


def st_binary(b: _Builder) -> bool:
    a = b.pick()
    if a is None:
        return False
    other, shape, odt = _partner(b, a)
    form = b.rng.choice(BINARY)
    dtype = _promote(a.dtype, odt)
    if dtype == "bool" and form not in ("{a} + {b}", "{a} * {b}"):
        form = "{a} * {b}"
    if form == "{a} / {b}" and dtype in ("int64", "bool"):
        dtype = "float32"
    b.new(form.format(a=a.name, b=other), shape, dtype)
    return True


def st_compare(b: _Builder) -> bool:
    a = b.pick(lambda v: v.dtype != "bool")
    if a is None:
        return False
    other, shape, _ = _partner(b, a)
    b.new(b.rng.choice(COMPARE).format(a=a.name, b=other), shape, "bool")
    return True


def st_where(b: _Builder) -> bool:
    a = b.pick(lambda v: v.dtype != "bool")
    if a is None:
        return False
    other, shape, odt = _partner(b, a)
    cond = b.pick(lambda v: v.dtype == "bool" and _broadcast(shape, v.shape) is not None)
    cond_src = cond.name if cond is not None and b.rng.random() < 0.6 else f"{a.name} > 0"
    if cond is not None and cond_src == cond.name:
        shape = _broadcast(shape, cond.shape)
    b.new(f"torch.where({cond_src}, {a.name}, {other})", shape, _promote(a.dtype, odt))
    return True


def st_reduction(b: _Builder) -> bool:
    a = b.pick()
    if a is None:
        return False
    if a.is_float:
        ops = ["sum", "mean", "amax", "amin", "argmax", "prod", "var", "logsumexp"]
    elif a.dtype == "int64":
        ops = ["sum", "amax", "amin", "argmin", "prod"]
    else:
        ops = ["any", "all", "sum"]
    op = b.rng.choice(ops)
    dtype = {"argmax": "int64", "argmin": "int64", "any": "bool", "all": "bool"}.get(op, a.dtype)
    if op == "sum" and a.dtype == "bool":
        dtype = "int64"
    if op == "prod" and a.dtype == "bool":
        dtype = "int64"
    if a.rank == 0 or b.rng.random() < 0.25:
        if op in ("logsumexp",):
            op = "sum"
        b.new(f"{a.name}.{op}()", (), dtype)
        return True
    dim = b.rng.randrange(-a.rank, a.rank)
    keep = b.rng.random() < 0.4
    shape = list(a.shape)
    if keep:
        shape[dim] = 1
    else:
        del shape[dim]
    if op in ("argmax", "argmin", "any", "all", "logsumexp"):
        b.new(f"{a.name}.{op}({dim}, keepdim={keep})", shape, dtype)
    elif op == "prod":
        b.new(f"{a.name}.prod({dim}, keepdim={keep})", shape, dtype)
    else:
        b.new(f"{a.name}.{op}(dim={dim}, keepdim={keep})", shape, dtype)
    return True


def st_view(b: _Builder) -> bool:
    a = b.pick()
    if a is None:
        return False
    r = b.rng
    kind = r.choice(
        [
            "reshape",
            "permute",
            "transpose",
            "slice",
            "expand",
            "unsqueeze",
            "squeeze",
            "flatten",
            "contiguous",
            "t",
            "select",
        ]
    )
    shape = list(a.shape)
    if kind == "reshape":
        n = math.prod(shape)
        divisors = [d for d in range(1, n + 1) if n % d == 0] if n else [1]
        d = r.choice(divisors)
        if n == 0:
            b.new(f"{a.name}.reshape(-1)", (0,), a.dtype, view_of=a)
        else:
            b.new(f"{a.name}.reshape({d}, -1)", (d, n // d), a.dtype, view_of=a)
    elif kind == "flatten":
        b.new(f"{a.name}.flatten()", (math.prod(shape),), a.dtype, view_of=a)
    elif kind == "contiguous":
        b.new(f"{a.name}.contiguous()", shape, a.dtype, view_of=a)
    elif a.rank == 0:
        b.new(f"{a.name}.unsqueeze(0)", (1,), a.dtype, view_of=a)
    elif kind == "permute":
        perm = list(range(a.rank))
        r.shuffle(perm)
        b.new(
            f"{a.name}.permute({', '.join(map(str, perm))})",
            [shape[p] for p in perm],
            a.dtype,
            view_of=a,
        )
    elif kind in ("transpose", "t"):
        if a.rank < 2:
            b.new(f"{a.name}.t()", shape, a.dtype, view_of=a)
        else:
            d0, d1 = r.sample(range(a.rank), 2)
            shape[d0], shape[d1] = shape[d1], shape[d0]
            b.new(f"{a.name}.transpose({d0}, {d1})", shape, a.dtype, view_of=a)
    elif kind == "slice":
        d = r.randrange(a.rank)
        n = shape[d]
        # negative and out-of-range bounds too: eager counts a negative one from the end and
        # clamps both into [0, n] (a start further back than the dim is 0: Mistral's cache)
        start = r.choice([0, 0, 1, -1, -(n + 3), n + 1])
        stop = r.choice([None, n, max(n - 1, 0), -1, n + 4, -(n + 2)])
        step = r.choice([1, 2, 3])
        sl = slice(start, stop, step)
        shape[d] = len(range(n)[sl])
        idx = ", ".join([":"] * d + [f"{start}:{'' if stop is None else stop}:{step}"])
        b.new(f"{a.name}[{idx}]", shape, a.dtype, view_of=a)
    elif kind == "expand":
        ones = [i for i, s in enumerate(shape) if s == 1]
        if not ones:
            b.new(
                f"{a.name}.unsqueeze(0).expand(3, *{a.name}.shape)",
                [3, *shape],
                a.dtype,
                view_of=a,
                expanded=True,
            )
        else:
            d = r.choice(ones)
            shape[d] = r.choice([2, 3, 5])
            b.new(
                f"{a.name}.expand({', '.join(map(str, shape))})",
                shape,
                a.dtype,
                view_of=a,
                expanded=True,
            )
    elif kind == "unsqueeze":
        d = r.randrange(-a.rank - 1, a.rank + 1)
        shape.insert(d if d >= 0 else len(shape) + 1 + d, 1)
        b.new(f"{a.name}.unsqueeze({d})", shape, a.dtype, view_of=a)
    elif kind == "squeeze":
        d = r.randrange(a.rank)
        if shape[d] == 1:
            del shape[d]
        b.new(f"{a.name}.squeeze({d})", shape, a.dtype, view_of=a)
    elif kind == "select":
        d = r.randrange(a.rank)
        if shape[d] == 0:
            return False
        i = r.randrange(-shape[d], shape[d])
        del shape[d]
        b.new(f"{a.name}.select({d}, {i})", shape, a.dtype, view_of=a)
    return True


def st_cat(b: _Builder) -> bool:
    a = b.pick(lambda v: v.rank >= 1)
    if a is None:
        return False
    d = b.rng.randrange(a.rank)
    others = [
        v
        for v in b.values
        if v is not a
        and v.rank == a.rank
        and v.dtype == a.dtype
        and all(x == y for i, (x, y) in enumerate(zip(v.shape, a.shape)) if i != d)
    ]
    o = b.rng.choice(others) if others and b.rng.random() < 0.7 else a
    shape = list(a.shape)
    shape[d] += o.shape[d]
    b.new(f"torch.cat([{a.name}, {o.name}], {d})", shape, a.dtype)
    return True


def st_index(b: _Builder) -> bool:
    a = b.pick(lambda v: v.rank >= 1)
    if a is None:
        return False
    r = b.rng
    d = r.randrange(a.rank)
    n = a.shape[d]
    kind = r.choice(["getitem", "index_select", "gather"])
    if n == 0:
        kind = "index_select"
    k = r.choice([0, 1, 3, 4])
    if kind == "gather":
        ishape = list(a.shape)
        ishape[d] = k
        idx = b.add_input(tuple(ishape), "int64", index_high=n)
        b.new(f"torch.gather({a.name}, {d}, {idx.name})", ishape, a.dtype)
        return True
    idx = b.add_input((k,), "int64", index_high=n)
    shape = list(a.shape)
    shape[d] = k
    if kind == "getitem" and d == 0:
        b.new(f"{a.name}[{idx.name}]", shape, a.dtype)
    else:
        b.new(f"torch.index_select({a.name}, {d}, {idx.name})", shape, a.dtype)
    return True


def st_matmul(b: _Builder) -> bool:
    a = b.pick(lambda v: v.is_float and v.rank in (2, 3) and v.dtype in ("float32", "float64"))
    if a is None:
        return False
    k = a.shape[-1]
    other = b.pick(lambda v: v.rank == 2 and v.shape[0] == k and v.dtype == a.dtype)
    if other is not None and b.rng.random() < 0.6:
        b.new(f"{a.name} @ {other.name}", (*a.shape[:-1], other.shape[1]), a.dtype)
    else:
        b.new(f"{a.name} @ {a.name}.transpose(-1, -2)", (*a.shape[:-1], a.shape[-2]), a.dtype)
    return True


def st_norm(b: _Builder) -> bool:
    a = b.pick(lambda v: v.is_float and v.rank >= 1)
    if a is None:
        return False
    kind = b.rng.choice(["softmax", "log_softmax", "layer_norm"])
    if kind == "layer_norm":
        b.new(f"torch.nn.functional.layer_norm({a.name}, {a.name}.shape[-1:])", a.shape, a.dtype)
    else:
        d = b.rng.randrange(-a.rank, a.rank)
        b.new(f"torch.{kind}({a.name}, {d})", a.shape, a.dtype)
    return True


def st_cast(b: _Builder) -> bool:
    a = b.pick()
    if a is None:
        return False
    to = b.rng.choice(["float32", "float64", "int64", "bool"])
    b.new(f"{a.name}.to(D.{to})", a.shape, to)
    return True


def st_constant(b: _Builder) -> bool:
    """A ``torch.tensor([...])`` constant in the function (a get_attr in the ATen graph)."""
    a = b.pick(lambda v: v.rank >= 1 and v.dtype != "bool")
    if a is None:
        return False
    n = a.shape[-1] if b.rng.random() < 0.7 else 1
    if a.is_float:
        vals = ", ".join(f"{b.rng.uniform(-2, 2):.3f}" for _ in range(n))
        b.new(f"{a.name} * torch.tensor([{vals}], dtype=D.{a.dtype})", a.shape, a.dtype)
    else:
        vals = ", ".join(str(b.rng.randint(-3, 3)) for _ in range(n))
        b.new(f"{a.name} + torch.tensor([{vals}])", a.shape, a.dtype)
    return True


def st_size_arith(b: _Builder) -> bool:
    """Ops whose arguments are sizes of other tensors (symbolic under dynamic=True)."""
    a = b.pick(lambda v: v.rank >= 1)
    if a is None:
        return False
    kind = b.rng.choice(["arange", "reshape", "new_zeros"])
    if kind == "arange":
        dt = a.dtype if a.dtype != "bool" else "int64"
        b.new(f"{a.name} + torch.arange({a.name}.shape[-1], dtype=D.{dt})", a.shape, dt)
    elif kind == "reshape":
        b.new(
            f"{a.name}.reshape({a.name}.shape[0], -1)",
            (a.shape[0], math.prod(a.shape[1:])),
            a.dtype,
            view_of=a,
        )
    else:
        b.new(f"{a.name}.new_zeros({a.name}.shape) + {a.name}", a.shape, a.dtype)
    return True


def st_inplace(b: _Builder) -> bool:
    """An in-place op on an intermediate (or a view of an input, writing the input)."""
    a = b.pick(lambda v: not v.is_input and not v.expanded and v.dtype != "bool")
    if a is None:
        return False
    op = b.rng.choice(["add_(1)", "mul_(2)", "clamp_(min=0)", "neg_()"])
    if a.is_float and b.rng.random() < 0.3:
        op = "sigmoid_()"
    other = b.pick(
        lambda v: v is not a and v.dtype == a.dtype and _broadcast(a.shape, v.shape) == a.shape
    )
    if other is not None and b.rng.random() < 0.4:
        op = f"add_({other.name})"
    b.lines.append(f"{a.name}.{op}")
    if a.view_of_input:
        b.mutated.add(-1)
    return True


def st_inplace_input(b: _Builder) -> bool:
    ins = [i for i, s in enumerate(b.inputs) if s.dtype != "bool" and s.index_high is None]
    if not ins:
        return False
    i = b.rng.choice(ins)
    op = b.rng.choice(["add_(1)", "mul_(2)", "sub_(3)", "clamp_(max=1)"])
    b.lines.append(f"x{i}.{op}")
    b.mutated.add(i)
    return True


def _conv_input(b: _Builder) -> Value | None:
    """A float32/float64 value of rank 3 or 4 (N, C, L[, W]) with channels, or a new input."""
    a = b.pick(lambda v: v.dtype in ("float32", "float64") and v.rank in (3, 4) and v.shape[1])
    if a is None or b.rng.random() < 0.4:
        r = b.rng
        shape = (
            r.choice([0, 1, 2, 3]),
            r.choice([1, 2, 3, 4]),
            *[r.choice([1, 3, 5, 8])] * r.choice([1, 2]),
        )
        a = b.add_input(shape, r.choice(["float32", "float32", "float64"]))
    return a


def st_conv(b: _Builder) -> bool:
    """``conv1d``/``conv2d`` (groups, stride, padding, dilation, with or without a bias), its
    weight and bias new inputs (parameters: they require grad in training programs)."""
    a = _conv_input(b)
    r = b.rng
    n, cin, *spatial = a.shape
    nd = len(spatial)
    groups = r.choice([1, 1, cin])
    cout = r.choice([1, 2, 3]) * groups
    k, stride, padding, dilation = (
        r.choice([1, 2, 3]),
        r.choice([1, 1, 2]),
        r.choice([0, 0, 1]),
        r.choice([1, 1, 2]),
    )
    out = [(s + 2 * padding - dilation * (k - 1) - 1) // stride + 1 for s in spatial]
    if any(o <= 0 for o in out):
        return False  # eager raises for a kernel larger than the padded input: not drawn
    w = b.add_input((cout, cin // groups, *[k] * nd), a.dtype)
    bias = b.add_input((cout,), a.dtype).name if r.random() < 0.5 else "None"
    b.new(
        f"torch.nn.functional.conv{nd}d({a.name}, {w.name}, {bias}, stride={stride}, "
        f"padding={padding}, dilation={dilation}, groups={groups})",
        (n, cout, *out),
        a.dtype,
    )
    return True


def st_batch_norm(b: _Builder) -> bool:
    """``batch_norm`` in training mode (running statistics: new inputs the call writes; one
    value per channel raises as eager does) or eval mode, with or without an affine weight."""
    a = (
        _conv_input(b)
        if b.rng.random() < 0.5
        else b.pick(lambda v: v.dtype in ("float32", "float64") and v.rank >= 2 and v.shape[1])
    )
    if a is None:
        return False
    r = b.rng
    c = a.shape[1]
    training = r.random() < 0.7
    first = len(b.inputs)  # the running mean's index, the running variance's next
    # contiguous, as the weight below: torch 2.13's CPU batch norm in eval mode gets the
    # weight's gradient wrong for a running mean of stride 2 (fuzz seed 6779)
    mean = b.add_input((c,), a.dtype, buffer=True, layout="contiguous")
    var = b.add_input((c,), a.dtype, buffer=True, layout="contiguous")
    weight, bias = ("None", "None")
    if r.random() < 0.7:
        # contiguous: torch 2.13's CPU batch-norm backward is wrong for a weight of stride 2
        # (tests/test_batch_norm_gradient_reference.py), and the float64 run shares the kernel,
        # so it cannot tell
        weight = b.add_input((c,), a.dtype, layout="contiguous").name
        bias = b.add_input((c,), a.dtype).name
    var_src = var.name if training else f"{var.name}.abs() + 0.5"
    b.new(
        f"torch.nn.functional.batch_norm({a.name}, {mean.name}, {var_src}, {weight}, {bias}, "
        f"training={training}, momentum=0.1, eps=1e-5)",
        a.shape,
        a.dtype,
    )
    if training:  # the call writes its running statistics
        b.mutated.update({first, first + 1})
    return True


def _pooled_size(size: int, k: int, stride: int, padding: int, dilation: int, ceil: bool) -> int:
    """The output length of a pooling window along one dim, as ATen computes it (with ceil
    mode, a last window that would start in the right padding is dropped)."""
    span = size + 2 * padding - dilation * (k - 1) - 1
    out = (-(-span // stride) if ceil else span // stride) + 1
    if ceil and (out - 1) * stride >= size + padding:
        out -= 1
    return out


def _window_without_taps(
    size: int, k: int, stride: int, padding: int, dilation: int, ceil: bool
) -> bool:
    """Some window along a dim of ``size`` has all its taps in the padding (a dilated window over
    a plane one wide). Eager's ``max_pool2d`` index of such a window lies past the plane, and
    its backward on a CPU writes the gradient there: out of bounds (heap corruption; seed 51455
    of ``--layout-share 1`` aborted the process in eager's own backward). Every window counts,
    ceil mode's last one too."""
    out = _pooled_size(size, k, stride, padding, dilation, ceil)
    return any(
        not any(0 <= o * stride - padding + j * dilation < size for j in range(k))
        for o in range(max(out, 0))
    )


def st_pool(b: _Builder) -> bool:
    """``max_pool2d`` (stride, padding, dilation, ceil mode; ties from its input's repeated
    values are eager's first maximum) or ``avg_pool2d`` (ceil mode, with or without the padding
    counted) over the last two dims of a rank-3 or rank-4 float value."""
    a = _conv_input(b)
    r = b.rng
    *lead, h, w = a.shape
    if not all(lead[-1:]) or h == 0 or w == 0:
        return False  # eager refuses empty channels (a rank-3 value's first dim) or planes
    k = r.choice([1, 2, 3])
    stride = r.choice([k, 1, 2])
    padding = r.choice([0, k // 2])
    ceil = r.random() < 0.3
    if r.random() < 0.7:
        dilation = r.choice([1, 1, 1, 2])
        out = [_pooled_size(s, k, stride, padding, dilation, ceil) for s in (h, w)]
        if any(_window_without_taps(s, k, stride, padding, dilation, ceil) for s in (h, w)):
            b.pool_without_taps = True
        call = (
            f"torch.nn.functional.max_pool2d({a.name}, {k}, {stride}, {padding}, {dilation}, "
            f"ceil_mode={ceil})"
        )
    else:
        out = [_pooled_size(s, k, stride, padding, 1, ceil) for s in (h, w)]
        call = (
            f"torch.nn.functional.avg_pool2d({a.name}, {k}, {stride}, {padding}, "
            f"ceil_mode={ceil}, count_include_pad={r.random() < 0.5})"
        )
    if any(o <= 0 for o in out):
        return False  # eager raises for a window larger than the padded input: not drawn
    b.new(call, (*lead, *out), a.dtype)
    return True


#: drawn besides STATEMENTS in the programs ``nn_share`` selects (a third random stream)
NN_STATEMENTS = [(st_conv, 3), (st_batch_norm, 2)]
#: drawn besides those in the programs ``pool_share`` selects (a fourth random stream, so that
#: programs of ``pool_share=0`` are those of earlier generator versions)
POOL_STATEMENTS = [(st_pool, 3)]

STATEMENTS = [
    (st_unary, 5),
    (st_binary, 6),
    (st_compare, 2),
    (st_where, 2),
    (st_reduction, 4),
    (st_view, 6),
    (st_cat, 2),
    (st_index, 2),
    (st_matmul, 2),
    (st_norm, 2),
    (st_cast, 2),
    (st_constant, 1),
    (st_size_arith, 1.5),
    (st_inplace, 1.5),
    (st_inplace_input, 1),
]


def generate(
    seed: int,
    *,
    triton_share: float = 0.1,
    dynamic_share: float = 0.3,
    train_share: float = 0.0,
    break_share: float = 0.0,
    nn_share: float = 0.0,
    pool_share: float = 0.0,
    layout_share: float = 0.0,
) -> Program:
    """The program of ``seed`` (the same program for the same seed and shares, on any machine).

    ``train_share``: the share of training programs (float inputs require grad, each with
    probability 0.8; the oracle compares gradients too); ``break_share``: the share of programs
    with one or two graph breaks between statements. Both are drawn from a second random stream
    after the program itself, so they do not change which program a seed draws. ``nn_share``:
    the share of programs that may also draw convolutions and batch norms (``NN_STATEMENTS``),
    decided by a third stream: the others are the programs of ``nn_share=0``. ``pool_share``:
    the share of programs that may also draw pooling (``POOL_STATEMENTS``), half of them
    compiled with max pooling's generated backward, decided by a fourth stream.
    ``layout_share``: the share of programs compiled with ``channels_last="always"`` (the
    layout pass CUDA runs by default: its convolutions read channels-last operands, a training
    forward saves them so and its backward is compiled for their strides), decided by a fifth
    stream: programs of ``layout_share=0`` are those of earlier versions."""
    rng = random.Random(seed)
    b = _Builder(rng, seed)
    table = STATEMENTS
    if random.Random(seed * 7919 + 5).random() < nn_share:
        table = STATEMENTS + NN_STATEMENTS
    pools = random.Random(seed * 7919 + 7)
    pooling = pools.random() < pool_share
    if pooling:
        table = table + POOL_STATEMENTS
    for _ in range(rng.choice([1, 1, 2, 2, 3])):
        b.add_input(b.shape(), b.dtype())
    for _ in range(rng.randint(2, 8)):
        fns, weights = zip(*table)
        for _attempt in range(5):
            if rng.choices(fns, weights)[0](b):
                break
    # outputs: the last value and sometimes another one (never an input itself: aliasing of
    # outputs to inputs is another helper's subject)
    computed = [v for v in b.values if not v.is_input]
    outs = [computed[-1].name] if computed else []
    if len(computed) > 1 and rng.random() < 0.5:
        extra = rng.choice(computed[:-1]).name
        if extra not in outs:
            outs.append(extra)
    if not outs:
        outs = [f"{b.values[0].name} + 0"]
    b.lines.append(f"return {', '.join(outs)}" if len(outs) > 1 else f"return {outs[0]}")
    program = Program(
        seed,
        b.inputs,
        b.lines,
        dynamic=rng.random() < dynamic_share,
        codegen="triton" if rng.random() < triton_share else "cpp",
        mutated_inputs=b.mutated,
        loop_ir={"max_pool_backward": "generated"} if pooling and pools.random() < 0.5 else {},
    )
    if random.Random(seed * 7919 + 11).random() < layout_share:
        program.loop_ir = {**program.loop_ir, "channels_last": "always"}
    extra = random.Random(seed * 7919 + 3)
    if extra.random() < train_share:
        program.inputs = [
            dataclasses.replace(s, requires_grad=extra.random() < 0.8)
            if s.dtype in LOW_FLOATS + FLOATS and s.index_high is None and not s.buffer
            else s
            for s in program.inputs
        ]
        program.train = any(s.requires_grad for s in program.inputs)
    if extra.random() < break_share and len(b.lines) >= 2:
        k = extra.choice([1, 1, 2])
        program.breaks = tuple(sorted({extra.randint(1, len(b.lines) - 1) for _ in range(k)}))
    if b.pool_without_taps and program.train:
        # eager's own backward writes out of bounds (``_window_without_taps``): no gradients.
        # Decided after every draw, so the seed's other choices stay as they were
        program.inputs = [dataclasses.replace(s, requires_grad=False) for s in program.inputs]
        program.train = False
    return program
