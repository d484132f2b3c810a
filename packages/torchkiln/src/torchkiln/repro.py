"""Standalone repro scripts for one captured FX graph.

``repro_source(gm, inputs, options, reason, title)`` writes a Python script that needs only torch
and torchkiln: it rebuilds the graph as an ``nn.Module`` (the FX graph's own code; parameters and
buffers it reads are rebuilt with their shapes, strides and dtypes), rebuilds the inputs from
their metadata with random values from a seed (integer tensors within the example's value range,
so indices stay valid), compiles the graph through torchkiln's backend in strict mode and
compares every output (and, when inputs require grad, every gradient) with eager. Run alone it
exits 1 printing the failure when it reproduces, 0 when the graph compiles and matches.
The pipeline writes one for each graph that falls back; ``python -m torchkiln repro <folder>``
writes one from a debug-dir folder on request (``repro_from_folder``), and ``python -m torchkiln
minify <script>`` shrinks it (``minify.py``), which loads the script with ``load_script``.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import torch
from torch.fx.graph_module import _format_import_block
from torch.package import sys_importer

from torchkiln.errors import TorchkilnError

#: CompileOptions fields a repro keeps (the rest are the process's: caches, strictness)
KEPT_OPTIONS = ("mode", "max_fusions", "codegen", "autotune", "cudagraphs", "loop_ir")


class NotReproducible(TorchkilnError):
    """A repro cannot be written (a graph calling submodules) or does not fail."""


def value_spec(value: Any) -> Any:
    """A graph input (or attribute) as plain data: ("tensor", shape, stride, dtype, device,
    requires_grad, low, high) with the value range of integer tensors; ("value", v) otherwise."""
    if isinstance(value, torch.Tensor):
        low = high = None
        if not value.is_floating_point() and not value.is_complex() and value.dtype != torch.bool:
            if value.numel() and not value.is_meta:
                low, high = int(value.min()), int(value.max())
            else:
                low, high = 0, 0
        return (
            "tensor",
            tuple(int(s) for s in value.shape),
            tuple(int(s) for s in value.stride()),
            str(value.dtype).removeprefix("torch."),
            str(value.device),
            bool(value.requires_grad),
            low,
            high,
        )
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        value = value.node.hint
    return ("value", value)


def _options_dict(options: Any) -> dict[str, Any]:
    if options is None:
        return {}
    if isinstance(options, dict):
        return {k: v for k, v in options.items() if k in KEPT_OPTIONS}
    defaults = type(options)()
    return {
        k: getattr(options, k) for k in KEPT_OPTIONS if getattr(options, k) != getattr(defaults, k)
    }


def graph_attributes(gm: torch.fx.GraphModule) -> dict[str, Any]:
    """The tensors the graph's ``get_attr`` nodes read, as specs (``is_param`` added)."""
    attrs = {}
    for node in gm.graph.nodes:
        if node.op == "call_module":
            raise NotReproducible(
                f"the graph calls submodule {node.target!r}; repro scripts "
                "rebuild tensors, not modules"
            )
        if node.op == "get_attr":
            value: Any = gm
            for part in node.target.split("."):
                value = getattr(value, part)
            if isinstance(value, torch.Tensor):
                attrs[node.target] = (*value_spec(value), isinstance(value, torch.nn.Parameter))
    return attrs


def graph_code(gm: torch.fx.GraphModule) -> tuple[str, str]:
    """(import lines, ``def forward`` source) of ``gm``, from FX's own code generation."""
    code = gm.graph.python_code(root_module="self")
    lines = _format_import_block(code.globals, sys_importer).splitlines()
    # the script imports torch itself; FX names some globals twice
    kept = [
        line
        for i, line in enumerate(lines)
        if line.strip() and line.strip() != "import torch" and line not in lines[:i]
    ]
    return "\n".join(kept), textwrap.dedent(code.src).strip()


def install_attribute(module: torch.nn.Module, target: str, value: torch.Tensor, spec: Any) -> None:
    """Set ``module.<target>`` (a dotted path; missing submodules are made) to ``value``: a
    Parameter (requires_grad from ``spec``) when ``spec`` says the graph read one, else a buffer.
    Repro scripts call it too."""
    *path, name = target.split(".")
    owner = module
    for part in path:
        if not hasattr(owner, part):
            owner.add_module(part, torch.nn.Module())
        owner = getattr(owner, part)
    if spec[8]:
        owner.register_parameter(name, torch.nn.Parameter(value, spec[5]))
    else:
        owner.register_buffer(name, value)


_TEMPLATE = '''\
"""torchkiln repro: {title}.

Why it was written: {reason}
Run alone: python {{this file}}  -> exit 1 and the failure when it reproduces, 0 when torchkiln
compiles the graph and matches eager. Shrink it: python -m torchkiln minify {{this file}}
Inputs and attributes are random (seed SEED) with the recorded shapes, strides and dtypes.
"""

import sys

import torch
from torchkiln.repro import install_attribute
{imports}

SEED = {seed}
# per graph input: ("tensor", shape, stride, dtype, device, requires_grad, low, high) or ("value", v)
INPUTS = {inputs}
# tensors the graph reads as attributes: the same fields, then whether it is a Parameter
ATTRIBUTES = {attributes}
# torchkiln CompileOptions fields the failing compile used (strict is added when checking)
OPTIONS = {options}
# what torchkiln reported
FAILURE = {reason!r}


def make_tensor(spec, generator):
    _, shape, stride, dtype, device, requires_grad, low, high = spec[:8]
    dtype = getattr(torch, dtype)
    out = torch.empty_strided(shape, stride, dtype=dtype, device="cpu")
    if dtype == torch.bool:
        out.copy_(torch.rand(shape, generator=generator) < 0.5)
    elif dtype.is_floating_point or dtype.is_complex:
        out.copy_(torch.randn(shape, generator=generator, dtype=torch.float64))
    else:
        out.copy_(torch.randint(low, high + 1, shape, generator=generator))
    return out.to(device).requires_grad_(requires_grad)


def make_inputs(seed=SEED):
    generator = torch.Generator().manual_seed(seed)
    return [make_tensor(s, generator) if s[0] == "tensor" else s[1] for s in INPUTS]


class Repro(torch.nn.Module):
    def __init__(self):
        super().__init__()
        generator = torch.Generator().manual_seed(SEED + 1)
        for target, spec in ATTRIBUTES.items():
            install_attribute(self, target, make_tensor(spec, generator).detach(), spec)

{forward}


def make_graph():
    """The graph as torch.fx traces the module above (the captured graph's own code)."""
    return torch.fx.symbolic_trace(Repro())


def _leaves(inputs):
    return [x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor)
            else x for x in inputs]


def _run(fn, inputs, seed):
    """Outputs, and the gradients of the inputs that require grad (random cotangents)."""
    outs = fn(*inputs)
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    wanted = [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad]
    grads = []
    diff = [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]
    if wanted and diff:
        generator = torch.Generator().manual_seed(seed + 2)
        cotangents = [torch.randn(o.shape, generator=generator, dtype=torch.float64).to(o)
                      for o in diff]
        grads = torch.autograd.grad(diff, wanted, cotangents, allow_unused=True)
    return [o.detach() if isinstance(o, torch.Tensor) else o for o in outs], list(grads)


def _close(name, expected, actual):
    if isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor):
        low = expected.dtype in (torch.float16, torch.bfloat16)
        tol = 2e-2 if low else 1e-3
        torch.testing.assert_close(actual, expected, rtol=tol, atol=tol, equal_nan=True,
                                   msg=lambda m: f"{{name}}: {{m.splitlines()[0]}}")
    elif expected != actual:
        raise AssertionError(f"{{name}}: {{actual!r}} != {{expected!r}}")


def check(gm=None, inputs=None, options=None, seed=SEED):
    """None when torchkiln compiles ``gm`` and matches eager on ``inputs``; else the failure,
    one line: "<ExceptionType>: ..." for a failure to compile or run, "accuracy: ..." for a
    wrong result, "eager: ..." when eager itself fails (not a torchkiln failure)."""
    import torchkiln

    gm = make_graph() if gm is None else gm
    inputs = make_inputs(seed) if inputs is None else inputs
    options = dict(OPTIONS if options is None else options, strict=True, graph_cache=False,
                   repro=False)
    try:
        expected = _run(gm, _leaves(inputs), seed)
    except Exception as error:  # noqa: BLE001
        return f"eager: {{type(error).__name__}}: {{error}}".splitlines()[0]
    try:
        example = _leaves(inputs)
        compiled = torchkiln.backend(gm, example, options=options)
        actual = _run(compiled, _leaves(inputs), seed)
    except Exception as error:  # noqa: BLE001
        cause = error.__cause__ or error
        return f"{{type(cause).__name__}}: {{cause}}".splitlines()[0]
    try:
        if len(actual[0]) != len(expected[0]):
            raise AssertionError(f"{{len(actual[0])}} outputs, eager has {{len(expected[0])}}")
        for i, (e, a) in enumerate(zip(expected[0], actual[0])):
            _close(f"output {{i}}", e, a)
        for i, (e, a) in enumerate(zip(expected[1], actual[1])):
            if e is not None or a is not None:
                _close(f"gradient {{i}}", e, a)
    except AssertionError as error:
        return f"accuracy: {{error}}".splitlines()[0]
    return None


if __name__ == "__main__":
    failure = check()
    print(f"reproduced: {{failure}}" if failure else "passed: torchkiln matches eager")
    sys.exit(1 if failure else 0)
'''


def repro_source(
    gm: torch.fx.GraphModule,
    inputs: list[Any],
    options: Any,
    reason: str,
    title: str,
    seed: int = 0,
    specs: list[Any] | None = None,
    attributes: dict[str, Any] | None = None,
) -> str:
    """The repro script of ``gm`` on inputs like ``inputs`` (see the module docstring);
    ``specs``/``attributes`` give the metadata directly instead (from a dump's
    graph_meta.json)."""
    imports, forward = graph_code(gm)
    specs = [value_spec(v) for v in inputs] if specs is None else specs
    return _TEMPLATE.format(
        title=title,
        reason=reason,
        imports=imports.strip(),
        seed=seed,
        inputs=_pretty(specs),
        attributes=_pretty(graph_attributes(gm) if attributes is None else attributes),
        options=repr(_options_dict(options)),
        forward=textwrap.indent(forward, "    "),
    )


def _pretty(value: Any) -> str:
    if isinstance(value, list) and value:
        return "[\n" + "".join(f"    {v!r},\n" for v in value) + "]"
    if isinstance(value, dict) and value:
        return "{\n" + "".join(f"    {k!r}: {v!r},\n" for k, v in value.items()) + "}"
    return repr(value)


def load_script(path: str | Path) -> types.ModuleType:
    """Import a repro script as a module (its ``__main__`` block does not run)."""
    path = Path(path)
    name = f"torchkiln_repro_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise NotReproducible(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look modules up by name
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    for needed in ("make_graph", "make_inputs", "check", "OPTIONS"):
        if not hasattr(module, needed):
            raise NotReproducible(f"{path}: not a torchkiln repro script (no {needed})")
    return module


def repro_from_folder(folder: str | Path) -> Path:
    """``python -m torchkiln repro <folder>``: write ``<folder>/repro.py`` for the graph of a
    debug-dir folder (kept if one is there already, from a fallback), from its ``fx_graph.py``
    (the graph module the dump wrote) and ``graph_meta.json`` (input and attribute metadata,
    the compile options); returns the script's path."""
    import json

    folder = Path(folder)
    script = folder / "repro.py"
    if script.exists():
        return script
    fx_file, meta_file = folder / "fx_graph.py", folder / "graph_meta.json"
    if not fx_file.exists() or not meta_file.exists():
        raise NotReproducible(
            f"{folder}: no fx_graph.py/graph_meta.json (not a torchkiln debug-dir graph folder)"
        )
    meta = json.loads(meta_file.read_text())
    inputs = [tuple(_tuples(s)) for s in meta["inputs"]]
    attributes = {k: tuple(_tuples(v)) for k, v in meta["attributes"].items()}
    gm = _graph_from_dump(fx_file.read_text(), attributes)
    failure = folder / "failure.txt"
    reason = (
        failure.read_text().strip() if failure.exists() else "asked for (python -m torchkiln repro)"
    )
    script.write_text(
        repro_source(
            gm,
            [],
            meta.get("options", {}),
            reason,
            folder.name,
            specs=inputs,
            attributes=attributes,
        )
    )
    return script


def _tuples(value: Any) -> Any:
    """JSON lists back to the tuples the specs hold."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _graph_from_dump(text: str, attributes: dict[str, Any]) -> torch.fx.GraphModule:
    """The graph module a dump's ``fx_graph.py`` (``print_readable``'s class) describes, traced
    with its attributes rebuilt (zeros of the recorded shape: only metadata goes in a repro)."""
    namespace: dict[str, Any] = {}
    source = compile("import torch\nfrom torch import device\n" + text, "<fx_graph.py>", "exec")
    exec(source, namespace)  # noqa: S102 - the dump torchkiln itself wrote
    classes = [
        v
        for v in namespace.values()
        if isinstance(v, type) and issubclass(v, torch.nn.Module) and v is not torch.nn.Module
    ]
    if not classes:
        raise NotReproducible("fx_graph.py holds no graph module class")
    module = classes[-1]()
    for target, spec in attributes.items():
        install_attribute(module, target, torch.zeros(spec[1], dtype=getattr(torch, spec[3])), spec)
    graph = torch.fx.Tracer().trace(module)
    for node in graph.nodes:
        node.type = None  # print_readable's shape annotations are strings, not types
    return torch.fx.GraphModule(module, graph)
