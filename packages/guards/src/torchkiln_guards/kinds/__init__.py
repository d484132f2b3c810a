"""One small frozen dataclass per guard kind."""

from .base import CodeContext, Guard, GuardFailure
from .basic import (
    ClosureCellMatch,
    ConstantMatch,
    DictKeysMatch,
    HasAttr,
    IdMatch,
    LengthMatch,
    TypeMatch,
)
from .module import ModuleHooksMatch, ModuleTrainingMatch
from .shape import ShapeGuard
from .state import GlobalStateMatch, StorageAliasGroups, StorageAliasMatch
from .tensor import TensorMatch

__all__ = [
    "ClosureCellMatch",
    "CodeContext",
    "ConstantMatch",
    "DictKeysMatch",
    "GlobalStateMatch",
    "Guard",
    "GuardFailure",
    "HasAttr",
    "IdMatch",
    "LengthMatch",
    "ModuleHooksMatch",
    "ModuleTrainingMatch",
    "ShapeGuard",
    "StorageAliasGroups",
    "StorageAliasMatch",
    "TensorMatch",
    "TypeMatch",
]
