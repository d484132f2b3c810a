"""Decoding of CPython bytecode into normalised instructions (one table per Python version)."""

from .decode import Instr, decode, version_table

__all__ = ["Instr", "decode", "version_table"]
