"""What a fuzzed program is: its inputs' recipes (``InputSpec``, ``make_input``) and its source
(``Program``: one function ``f(x0, x1, ...)``, run for real or with every float dtype as float64
through the ``D`` namespace). ``generator.py`` draws them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import torch

DTYPE_NAMES = {"float32", "float64", "float16", "bfloat16", "int64", "bool"}
#: a graph break between two statements: eager runs it as nothing; capture splits the function
#: there and continues in a resume_at_N function, with every live value handed over
BREAK_LINE = 'print(end="")  # graph break'


def dtype_namespace(reference: bool = False) -> SimpleNamespace:
    """``D`` for the generated source: real dtypes, or every float dtype as float64."""
    names = {n: getattr(torch, n) for n in DTYPE_NAMES}
    if reference:
        names.update({n: torch.float64 for n in ("float32", "float16", "bfloat16")})
    return SimpleNamespace(**names)


@dataclass(frozen=True)
class InputSpec:
    """How to build one input: logical shape, dtype, layout, and for index inputs their bound."""

    shape: tuple[int, ...]
    dtype: str
    layout: str = "contiguous"  # "contiguous" | "transposed" | "strided" (every 2nd element)
    index_high: int | None = None  # int64 indices in [0, index_high)
    requires_grad: bool = False  # training programs: the gradient of the loss reaches it
    buffer: bool = False  # a batch norm's running statistics: never requires grad


@dataclass
class Program:
    seed: int
    inputs: list[InputSpec]
    lines: list[str]
    dynamic: bool = False
    codegen: str = "cpp"  # "cpp" or "triton" (Triton's interpreter on CPU)
    mutated_inputs: set[int] = field(default_factory=set)
    #: a training program: the oracle also compares the gradients of a loss over its float
    #: results with respect to the inputs that require grad
    train: bool = False
    #: indexes into ``lines`` before which the source has a graph break (``print(end="")``)
    breaks: tuple[int, ...] = ()
    #: ``LoopIROptions`` fields the program is compiled with (``pool_share`` programs: half ask
    #: for max pooling's generated backward, which the CPU's default leaves to ATen;
    #: ``layout_share`` programs ``channels_last="always"``)
    loop_ir: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"fuzz_{self.seed}"

    @property
    def source(self) -> str:
        params = ", ".join(f"x{i}" for i in range(len(self.inputs)))
        lines = [
            text
            for k, line in enumerate(self.lines)
            for text in ([BREAK_LINE] if k in self.breaks else []) + [line]
        ]
        body = "\n".join(f"    {line}" for line in lines)
        return f"def {self.name}({params}):\n{body}\n"

    def describe(self) -> str:
        ins = ", ".join(
            f"x{i}: {s.dtype}{list(s.shape)} {s.layout}"
            + (f" idx<{s.index_high}" if s.index_high is not None else "")
            + (" grad" if s.requires_grad else "")
            for i, s in enumerate(self.inputs)
        )
        return (
            f"# seed {self.seed} dynamic={self.dynamic} codegen={self.codegen} "
            f"train={self.train}" + (f" loop_ir={self.loop_ir}" if self.loop_ir else "") + "\n"
            f"# inputs: {ins}\n{self.source}"
        )

    def function(self, reference: bool = False):
        """The program as a fresh function object (its own code object: no shared caches)."""
        ns = {"torch": torch, "D": dtype_namespace(reference)}
        exec(compile(self.source, f"<{self.name}>", "exec"), ns)  # noqa: S102 - generated here
        return ns[self.name]


def make_input(spec: InputSpec, seed: int, reference: bool = False) -> torch.Tensor:
    """The input for ``spec``, the same values for the same seed; float64 for the reference
    (made from the same low-precision values, then upcast, then given the same layout)."""
    g = torch.Generator().manual_seed(seed)
    shape = list(spec.shape)
    if spec.layout == "transposed":
        shape[-1], shape[-2] = shape[-2], shape[-1]
    elif spec.layout == "strided":
        shape[-1] = shape[-1] * 2
    dtype = getattr(torch, spec.dtype)
    if spec.index_high is not None:
        base = torch.randint(0, max(spec.index_high, 1), shape, generator=g)
    elif dtype == torch.bool:
        base = torch.rand(shape, generator=g) > 0.5
    elif dtype == torch.int64:
        base = torch.randint(-5, 6, shape, generator=g)
    else:
        base = torch.randn(shape, generator=g).to(dtype)
        if reference:
            base = base.to(torch.float64)
    if spec.layout == "transposed":
        return base.transpose(-1, -2)
    if spec.layout == "strided":
        return base[..., ::2]
    return base
