# ruff: noqa: B009, B010
# (the programs spell these constructs on purpose: each is bytecode capture must handle)
"""User-defined classes and objects: attributes, methods, properties, super(), class attributes."""

from __future__ import annotations

import pytest
import torch
from _conformance_harness import Program, ids, run_program, xy34


class Scaler:
    def __init__(self, k: float) -> None:
        self.k = k

    def apply(self, x):
        return x * self.k

    def __call__(self, x):
        return self.apply(x) + 1


class WithProperty:
    def __init__(self) -> None:
        self._scale = 2.0

    @property
    def scale(self):
        return self._scale * 2

    @property
    def doubled(self):
        return self.scale * 2


class Base:
    bias = 1.0

    def transform(self, x):
        return x + self.bias

    def describe(self):
        return "base"


class Derived(Base):
    bias = 3.0

    def transform(self, x):
        return super().transform(x) * 2

    def describe(self):
        return "derived:" + super().describe()


class Grand(Derived):
    def transform(self, x):
        return super().transform(x) - 1


class WithInitSuper(Base):
    def __init__(self, k: float) -> None:
        super().__init__()
        self.k = k

    def transform(self, x):
        return Base.transform(self, x) * self.k


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self) -> None:
        self.a = 1.5
        self.b = -2.0


class Counter:
    count = 0


class WithStatic:
    @staticmethod
    def act(x):
        return torch.relu(x)

    @classmethod
    def make(cls, k):
        obj = cls()
        obj.k = k
        return obj


class Dunder:
    def __init__(self, t) -> None:
        self.t = t

    def __add__(self, other):
        return Dunder(self.t + other.t)

    def __mul__(self, k):
        return Dunder(self.t * k)

    def __len__(self):
        return 3

    def __getitem__(self, i):
        return self.t[i]

    def __contains__(self, item):
        return item == "t"


SCALER = Scaler(3.0)
PROP = WithProperty()
DERIVED = Derived()
GRAND = Grand()


def obj_global_method(x):
    return SCALER.apply(x)


def obj_global_call(x):
    return SCALER(x)


def obj_created_inside(x):
    s = Scaler(0.5)
    return s.apply(x)


def obj_created_inside_call(x):
    return Scaler(2.0)(x)


def obj_attribute_read(x):
    return x * SCALER.k


def obj_property(x):
    return x * PROP.scale


def obj_property_chain(x):
    return x + PROP.doubled


def obj_super_method(x):
    return DERIVED.transform(x)


def obj_super_two_levels(x):
    return GRAND.transform(x)


def obj_super_string(x):
    return x * len(DERIVED.describe())


def obj_super_init_inside(x):
    o = WithInitSuper(4.0)
    return o.transform(x)


def obj_class_attribute(x):
    return x * Derived.bias + Base.bias


def obj_unbound_method_call(x):
    return Base.transform(DERIVED, x)


def obj_slots(x):
    s = Slotted()
    return x * s.a + s.b


def obj_staticmethod_via_instance(x):
    return WithStatic().act(x)


def obj_classmethod_factory(x):
    o = WithStatic.make(5.0)
    return x * o.k


def obj_dunder_add_mul(x, y):
    d = (Dunder(x) + Dunder(y)) * 2
    return d.t


def obj_dunder_len_getitem(x):
    d = Dunder(x)
    return d[len(d) - 1] if "t" in d else x


def obj_isinstance_hierarchy(x):
    o = GRAND
    if isinstance(o, Base) and issubclass(type(o), Derived):
        return x + 1
    return x


def obj_type_name(x):
    return x * 2 if type(DERIVED).__name__ == "Derived" else x


def obj_getattr_default(x):
    return x * getattr(SCALER, "missing", 7.0) + getattr(SCALER, "k")


def obj_hasattr(x):
    return x + 1 if hasattr(SCALER, "k") and not hasattr(SCALER, "nope") else x


def obj_setattr_local(x):
    s = Scaler(1.0)
    setattr(s, "k", 9.0)
    return s.apply(x)


def obj_local_attr_mutation_then_use(x):
    s = Scaler(1.0)
    s.k = s.k + 2
    s.extra = x * 2
    return s.apply(x) + s.extra


def obj_tensor_attribute(x):
    s = Scaler(1.0)
    s.k = x.mean()
    return s.apply(x)


class ValueBox:
    def __init__(self, v):
        self.v = v

    def get(self):
        return self.v

    def scaled(self, k):
        return ValueBox(self.v * k)


def obj_method_returns_self_attr(x):
    return ValueBox(x + 1).get() * 2


def obj_method_returns_new_object(x):
    return ValueBox(x).scaled(3.0).scaled(0.5).get()


def obj_bound_method_as_value(x):
    f = SCALER.apply
    return f(x) + f(x * 2)


def obj_dict_attr(x):
    return x * len(vars(SCALER))


def obj_callable_builtin(x):
    return x * 2 if callable(SCALER) and not callable(3) else x


PROGRAMS = [
    Program(obj_global_method),
    Program(obj_global_call),
    Program(obj_created_inside),
    Program(obj_created_inside_call),
    Program(obj_attribute_read),
    Program(obj_property),
    Program(obj_property_chain),
    Program(obj_super_method),
    Program(obj_super_two_levels),
    Program(obj_super_string),
    Program(obj_super_init_inside),
    Program(obj_class_attribute),
    Program(obj_unbound_method_call),
    Program(obj_slots),
    Program(obj_staticmethod_via_instance),
    Program(obj_classmethod_factory),
    Program(obj_dunder_add_mul, xy34),
    Program(obj_dunder_len_getitem),
    Program(obj_isinstance_hierarchy),
    Program(obj_type_name),
    Program(obj_getattr_default),
    Program(obj_hasattr),
    Program(obj_setattr_local),
    Program(obj_local_attr_mutation_then_use),
    Program(obj_tensor_attribute),
    Program(obj_method_returns_self_attr),
    Program(obj_method_returns_new_object),
    Program(obj_bound_method_as_value),
    Program(obj_dict_attr),
    Program(obj_callable_builtin),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=ids(PROGRAMS))
def test_program(program: Program) -> None:
    run_program(program)
