"""The translator's control-flow opcodes: jumps, branches on values known at capture time
(specialised), ``for`` loops (unrolled) and the generator opcodes of inlined generators.

A mixin of ``InstructionTranslator`` (translator.py): it moves the translator's instruction
pointer (``jump``, ``ip``) and reads values through its ``truth`` and ``unpack``.
"""

from __future__ import annotations

from .bytecode import version_table
from .exc import Unsupported
from .variables.base import ConstantVariable
from .variables.containers import IteratorVariable
from .variables.generators import Suspend

_VT = version_table()


class ControlFlowOpcodes:
    """JUMP_*, POP_JUMP_IF_*, GET_ITER/FOR_ITER, and RETURN_GENERATOR, YIELD_VALUE, SEND."""

    # --- control flow ----------------------------------------------------------------------------------
    def JUMP_FORWARD(self, inst):
        self.jump(inst)

    JUMP_BACKWARD = JUMP_ABSOLUTE = JUMP = JUMP_FORWARD

    def _cond(self, v) -> bool:
        return self.truth(v)

    def POP_JUMP_IF_TRUE(self, inst):
        if self._cond(self.pop()):
            self.jump(inst)

    def POP_JUMP_IF_FALSE(self, inst):
        if not self._cond(self.pop()):
            self.jump(inst)

    def POP_JUMP_IF_NONE(self, inst):
        v = self.pop()
        if v.is_python_constant() and v.as_python_constant() is None:
            self.jump(inst)

    def POP_JUMP_IF_NOT_NONE(self, inst):
        v = self.pop()
        if not (v.is_python_constant() and v.as_python_constant() is None):
            self.jump(inst)

    def JUMP_IF_TRUE_OR_POP(self, inst):
        if self._cond(self.stack[-1]):
            self.jump(inst)
        else:
            self.pop()

    def JUMP_IF_FALSE_OR_POP(self, inst):
        if not self._cond(self.stack[-1]):
            self.jump(inst)
        else:
            self.pop()

    def GET_ITER(self, inst):  # iterable -> iterator
        v = self.pop()
        self.push(v if isinstance(v, IteratorVariable) else IteratorVariable(self.unpack(v)))

    def FOR_ITER(self, inst):  # iterator -> iterator next  |  exhausted: iterator -> (jump)
        it = self.stack[-1]
        v = it.next()
        if v is None:
            self.pop()
            self.ip = inst.target + (1 if _VT.for_iter_skips_end_for else 0)
        else:
            self.push(v)

    # --- generators (inlined: only iterated) ---------------------------------------------
    def RETURN_GENERATOR(self, inst):  # -> None (the generator object is not modelled)
        if getattr(self, "yielded", None) is None and not getattr(self, "suspended", False):
            raise Unsupported("generator functions", "return a list instead")
        self.push(ConstantVariable(None))

    def YIELD_VALUE(self, inst):  # x -> None (the value sent back)
        if getattr(self, "suspended", False):
            raise Suspend(self.pop())  # a contextmanager's generator: resumed at the block's exit
        if getattr(self, "yielded", None) is None:
            raise Unsupported("yield outside a generator being inlined")
        self.yielded.append(self.pop())
        self.push(ConstantVariable(None))

    def GET_YIELD_FROM_ITER(self, inst):  # iterable -> iterator (yield from: items known now)
        x = self.pop()
        self.push(x if isinstance(x, IteratorVariable) else IteratorVariable(self.unpack(x)))

    def SEND(self, inst):  # receiver value -> receiver item  |  (exhausted) jump with its result
        self.pop()  # the value sent in: inlined generators are only iterated (always None)
        item = self.stack[-1].next()
        if item is not None:
            self.push(item)
            return
        if _VT.send_pops_receiver:
            self.stack[-1] = ConstantVariable(None)
        else:
            self.push(ConstantVariable(None))
        self.jump(inst)

    def END_SEND(self, inst):  # (3.12) receiver value -> value
        v = self.pop()
        self.pop()
        self.push(v)
