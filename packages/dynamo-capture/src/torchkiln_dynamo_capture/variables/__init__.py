"""VariableTrackers: what the symbolic evaluator knows about each Python value (one file per family)."""

from .base import ConstantVariable, NullVariable, VariableTracker

__all__ = ["ConstantVariable", "NullVariable", "VariableTracker"]
