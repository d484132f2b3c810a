"""Dataclasses (plain, frozen, nested, with defaults) and transformers' ModelOutput as values."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest
import torch
from _conformance_harness import Program, ids, randn, run_program

try:
    from transformers.modeling_outputs import BaseModelOutput
    from transformers.utils import ModelOutput
except ImportError:  # pragma: no cover - CI installs transformers
    ModelOutput = None


@dataclass
class Out:
    logits: torch.Tensor
    hidden: torch.Tensor | None = None
    extra: float = 1.0


@dataclass(frozen=True)
class FrozenCfg:
    scale: float = 2.0
    shift: float = 0.5
    names: tuple = ("a", "b")


@dataclass
class Nested:
    out: Out
    items: list = field(default_factory=list)


CFG = FrozenCfg()


def dc_construct_read(x):
    o = Out(x * 2)
    return o.logits + o.extra


def dc_return(x):
    return Out(x + 1, hidden=x * 2)


def dc_return_default_none(x):
    return Out(x.relu())


def dc_frozen_global(x):
    return x * CFG.scale + CFG.shift * len(CFG.names)


def dc_frozen_local(x):
    cfg = FrozenCfg(scale=3.0)
    return x * cfg.scale


def dc_replace(x):
    cfg = dataclasses.replace(CFG, scale=4.0)
    return x * cfg.scale + cfg.shift


def dc_mutate_field(x):
    o = Out(x)
    o.logits = o.logits * 5
    o.extra = 3.0
    return o


def dc_nested(x):
    n = Nested(Out(x, x * 2), [1, 2])
    return n.out.hidden * len(n.items)


def dc_nested_return(x):
    return Nested(Out(x.sin()), [x.cos()])


def dc_fields_iteration(x):
    o = Out(x, x * 3)
    total = 0
    for f in dataclasses.fields(o):
        v = getattr(o, f.name)
        if isinstance(v, torch.Tensor):
            total = total + v
    return total


def dc_is_dataclass(x):
    return x * 2 if dataclasses.is_dataclass(CFG) else x


def dc_as_argument(x, out):
    return out.logits + x


def mo_construct_attribute(x):
    o = BaseModelOutput(last_hidden_state=x * 2)
    return o.last_hidden_state + 1


def mo_return(x):
    return BaseModelOutput(last_hidden_state=x + 1, hidden_states=(x, x * 2))


def mo_index_and_key(x):
    o = BaseModelOutput(last_hidden_state=x * 3, hidden_states=(x,))
    return o[0] + o["last_hidden_state"] + o.hidden_states[0]


def mo_to_tuple(x):
    o = BaseModelOutput(last_hidden_state=x, attentions=(x * 2,))
    t = o.to_tuple()
    return t[0] + t[1][0] * len(t)


def mo_keys_skip_none(x):
    o = BaseModelOutput(last_hidden_state=x)
    return x * len(o.keys()) + ("attentions" in o) * 10


def mo_get_missing(x):
    o = BaseModelOutput(last_hidden_state=x)
    return o.last_hidden_state * 2 if o.attentions is None else x * 0


if ModelOutput is not None:

    @dataclass
    class CustomOutput(ModelOutput):
        loss: torch.Tensor | None = None
        logits: torch.Tensor | None = None
        aux: tuple | None = None

    def mo_custom_subclass(x):
        return CustomOutput(logits=x.softmax(-1), aux=(x.sum(),))

    def mo_custom_with_loss(x):
        logits = x * 2
        return CustomOutput(loss=logits.mean(), logits=logits)


PROGRAMS = [
    Program(dc_construct_read),
    Program(dc_return),
    Program(dc_return_default_none),
    Program(dc_frozen_global),
    Program(dc_frozen_local),
    Program(dc_replace),
    Program(dc_mutate_field),
    Program(dc_nested),
    Program(dc_nested_return),
    Program(dc_fields_iteration),
    Program(dc_is_dataclass),
    Program(dc_as_argument, lambda: (randn(3, 4), Out(randn(3, 4)))),
]
if ModelOutput is not None:
    PROGRAMS += [
        Program(mo_construct_attribute),
        Program(mo_return),
        Program(mo_index_and_key),
        Program(mo_to_tuple),
        Program(mo_keys_skip_none),
        Program(mo_get_missing),
        Program(mo_custom_subclass),
        Program(mo_custom_with_loss),
    ]


@pytest.mark.parametrize("program", PROGRAMS, ids=ids(PROGRAMS))
def test_program(program: Program) -> None:
    run_program(program)
