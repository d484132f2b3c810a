"""Guard objects, guard sets compiled to one fast check function, and the reason a check failed.

Capture records guards (``TensorMatch.from_tensor(LocalSource("x"), x)``, ``IdMatch(...)``, ...)
while it traces; ``compile_guards(guards, signature=..., f_globals=..., closure=...)`` turns them
into one generated function with the user function's parameters; ``explain_failure`` names the
first guard that fails on a miss.
"""

from .compile import (
    CompiledGuards,
    GuardCompileError,
    GuardSet,
    UnguardableSourceError,
    compile_guards,
    order_guards,
)
from .kinds import (
    ClosureCellMatch,
    ConstantMatch,
    DictKeysMatch,
    GlobalStateMatch,
    Guard,
    GuardFailure,
    HasAttr,
    IdMatch,
    LengthMatch,
    ModuleHooksMatch,
    ModuleTrainingMatch,
    ShapeGuard,
    StorageAliasGroups,
    StorageAliasMatch,
    TensorMatch,
    TypeMatch,
)
from .source import (
    AttrSource,
    ClosureSource,
    GlobalSource,
    ItemSource,
    LocalSource,
    SizeSource,
    Source,
    StrideSource,
)

__version__ = "0.4.3"

__all__ = [
    "AttrSource",
    "ClosureCellMatch",
    "ClosureSource",
    "CompiledGuards",
    "ConstantMatch",
    "DictKeysMatch",
    "GlobalSource",
    "GlobalStateMatch",
    "Guard",
    "GuardCompileError",
    "GuardFailure",
    "GuardSet",
    "HasAttr",
    "IdMatch",
    "ItemSource",
    "LengthMatch",
    "LocalSource",
    "ModuleHooksMatch",
    "ModuleTrainingMatch",
    "ShapeGuard",
    "SizeSource",
    "StrideSource",
    "Source",
    "StorageAliasGroups",
    "StorageAliasMatch",
    "TensorMatch",
    "TypeMatch",
    "UnguardableSourceError",
    "compile_guards",
    "order_guards",
]
