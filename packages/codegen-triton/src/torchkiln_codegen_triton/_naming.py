"""How a kernel's ``@triton.jit`` function is named: from a hash of its module's text.

A graph's kernel steps are named per launch site (``kernel3``, ``kernel17``), but the twelve
identical layers of a transformer give twelve kernels whose code differs only in that name, and
Triton compiles each (its cache key holds the function's source, name included). So the source is
generated with ``PLACEHOLDER`` for a name, and the name is made from the sha256 of that text:
kernels with the same text get the same name, hence the same module text, which the code cache
(``source_module``, keyed by the text's hash) imports once per process: every launch site of
those kernels holds the one ``JITFunction``, and Triton compiles each (function, specialization)
once, across the forward and backward graphs and graphs compiled later too. Anything that changes
the text (a constant, a dtype, a block layout, the comment saying why a reduction loops) makes
another name: only identical code is shared. Sharing needs no unique hash either: two different
texts that got one name would still be two modules, each compiled from its own source.

The launch site keeps its own name (``TritonCompiledKernel.name``, for errors, the wrapper and the
debug dump), grid, arguments and ready launch; only the function is shared.
"""

from __future__ import annotations

import hashlib

#: the function name ``generate`` writes before the text is hashed (a name no kernel uses)
PLACEHOLDER = "tk_unnamed_kernel"

#: hex digits of the text's sha256 in a name: 48 bits (a clash would only share a name)
HASH_DIGITS = 12


def kernel_kind(
    *, reduction: bool, looped: bool, split: bool, mixed: bool = False, template: bool = False
) -> str:
    """A short word for the kernel's shape, the readable part of its name (profilers show it):
    ``poi`` pointwise, ``per`` persistent reduction, ``red`` looped, ``split`` split reduction,
    ``mix`` mixed order (rows reduced whole, columns across each program's rows), ``mm`` a
    matrix product and its epilogue (``_template.py``)."""
    if template:
        return "mm"
    if not reduction:
        return "poi"
    if mixed:
        return "mix"
    if split:
        return "split"
    return "red" if looped else "per"


def shared_module(text: str, kind: str) -> tuple[str, str]:
    """(the function name, the module text) for a module ``text`` written with ``PLACEHOLDER``
    for the function's name (a split reduction's second function is ``<name>_finish``)."""
    name = f"tk_{kind}_{hashlib.sha256(text.encode()).hexdigest()[:HASH_DIGITS]}"
    return name, text.replace(PLACEHOLDER, name)
