"""The translator's opcodes that build containers, strings and slices, and unpack sequences.

A mixin of ``InstructionTranslator`` (translator.py): it works on the frame's value stack through
the translator's ``push``/``pop``/``popn``/``unpack`` and its output's side effects.
"""

from __future__ import annotations

from .exc import Unsupported
from .variables.base import ConstantVariable
from .variables.containers import DictVariable, ListVariable, TupleVariable
from .variables.symbolic import SliceVariable, SymNodeVariable
from .variables.tensors import TensorVariable


class BuildingOpcodes:
    """BUILD_*, FORMAT_VALUE, the comprehension appends, LIST_TO_TUPLE and UNPACK_*."""

    # --- building and unpacking ----------------------------------------------------------------------
    def BUILD_TUPLE(self, inst):
        self.push(TupleVariable(self.popn(inst.arg)))

    def BUILD_LIST(self, inst):
        self.push(ListVariable(self.popn(inst.arg)))

    def BUILD_SET(self, inst):
        self.push(ConstantVariable({v.as_python_constant() for v in self.popn(inst.arg)}))

    def BUILD_MAP(self, inst):  # k1 v1 ... -> dict
        flat = self.popn(2 * inst.arg)
        self.push(
            DictVariable(
                {flat[i].as_python_constant(): flat[i + 1] for i in range(0, len(flat), 2)}
            )
        )

    def BUILD_CONST_KEY_MAP(self, inst):  # v1..vn keys -> dict
        keys = self.pop().as_python_constant()
        self.push(DictVariable(dict(zip(keys, self.popn(inst.arg)))))

    def BUILD_STRING(self, inst):
        self.push(ConstantVariable("".join(v.as_python_constant() for v in self.popn(inst.arg))))

    def FORMAT_VALUE(self, inst):  # x [spec] -> str
        spec = self.pop().as_python_constant() if inst.arg & 0x04 else ""
        v = self.pop()
        val = v.as_python_constant() if v.is_python_constant() else v.real_value()
        if isinstance(v, TensorVariable):
            raise Unsupported("formatting a tensor into a string")
        conv = inst.arg & 0x03
        val = {0: val, 1: str(val), 2: repr(val), 3: ascii(val)}[conv]
        self.push(ConstantVariable(format(val, spec)))

    def BUILD_SLICE(self, inst):
        self.push(self.make_slice(self.popn(inst.arg)))

    @staticmethod
    def make_slice(parts):
        """The slice of ``parts`` (start, stop[, step]) for BUILD_SLICE and 3.12's BINARY_SLICE /
        STORE_SLICE alike: symbolic bounds stay symbolic (x[:, :n] with a symbolic n), where
        reading them as constants would specialize the graph on their values."""
        if any(isinstance(p, TensorVariable) for p in parts):
            raise Unsupported("slice bounds that are tensors")
        if any(isinstance(p, SymNodeVariable) for p in parts):
            return SliceVariable(parts)
        return ConstantVariable(slice(*(p.as_python_constant() for p in parts)))

    def LIST_APPEND(self, inst):  # list(i) ... v -> list(i) ...
        v = self.pop()
        target = self.stack[-inst.arg]
        target.items.append(v)
        self.out.side_effects.mutated(target)  # a list from outside (handed over by a break)

    def SET_ADD(self, inst):
        target = self.stack[-inst.arg - 1]
        if target.source is not None:
            raise Unsupported("adding to a set from outside (handed over by a graph break)")
        v = self.pop()
        target.value.add(v.as_python_constant())

    def MAP_ADD(self, inst):  # dict(i) ... k v
        v, k = self.pop(), self.pop()
        target = self.stack[-inst.arg]
        target.items[k.as_python_constant()] = v
        self.out.side_effects.mutated(target)

    def LIST_EXTEND(self, inst):
        v = self.pop()
        target = self.stack[-inst.arg]
        target.items.extend(self.unpack(v))
        self.out.side_effects.mutated(target)

    def SET_UPDATE(self, inst):
        v = self.pop()
        self.stack[-inst.arg].value.update(x.as_python_constant() for x in self.unpack(v))

    def DICT_UPDATE(self, inst):
        v = self.pop()
        self.stack[-inst.arg].call_method(self, "update", [v], {})

    DICT_MERGE = DICT_UPDATE

    def LIST_TO_TUPLE(self, inst):
        self.push(TupleVariable(self.pop().items))

    def UNPACK_SEQUENCE(self, inst):  # seq -> items (reversed)
        items = self.unpack(self.pop())
        if len(items) != inst.arg:
            raise Unsupported(f"unpacking {len(items)} values into {inst.arg}")
        self.stack.extend(reversed(items))

    def UNPACK_EX(self, inst):  # seq -> after.. star before..
        items = self.unpack(self.pop())
        before, after = inst.arg & 0xFF, inst.arg >> 8
        star = ListVariable(items[before : len(items) - after])
        vals = items[:before] + [star] + items[len(items) - after :]
        self.stack.extend(reversed(vals))
