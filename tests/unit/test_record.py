"""assure.core.record: the gateway's dataclasses without `dataclasses` (issue 25, its boot).
Each behaviour is held against what `dataclasses` does with the same declaration."""

from __future__ import annotations

import dataclasses

import pytest

from assure.core import record
from assure.core.record import dataclass, field


@dataclass(frozen=True, kw_only=True)
class Frozen:
    name: str
    scope: tuple[str, ...] = ()
    extra: dict[str, int] = field(default_factory=dict)
    note: str = field(default="", compare=False)
    derived: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "derived", len(self.scope))


@dataclass
class Mutable:
    a: int
    b: list[int] = field(default_factory=list)


def test_a_frozen_record_refuses_assignment_and_deletion() -> None:
    f = Frozen(name="x")
    with pytest.raises(record.FrozenInstanceError):
        f.name = "y"
    with pytest.raises(AttributeError):
        del f.name
    assert f.name == "x"
    assert record.is_frozen(Frozen) and not record.is_frozen(Mutable)


def test_init_takes_what_a_dataclass_takes() -> None:
    f = Frozen(name="x", scope=("a", "b"))
    assert (f.name, f.scope, f.extra, f.note, f.derived) == ("x", ("a", "b"), {}, "", 2)
    assert Frozen(name="x").extra is not Frozen(name="x").extra  # a fresh default each time
    with pytest.raises(TypeError):
        Frozen("x")  # kw_only
    with pytest.raises(TypeError):
        Frozen(name="x", derived=3)  # init=False
    with pytest.raises(TypeError):
        Frozen()
    m = Mutable(1)
    m.a = 2
    assert (m.a, m.b) == (2, [])


def test_eq_hash_and_repr_follow_the_field_options() -> None:
    assert Frozen(name="x", note="a") == Frozen(name="x", note="b")  # compare=False
    assert Frozen(name="x") != Frozen(name="y")
    assert hash(Frozen(name="x", scope=("a",), extra=None)) == hash(
        Frozen(name="x", scope=("a",), extra=None)
    )
    assert Mutable(1) == Mutable(1) and Mutable(1) != Frozen(name="x")
    with pytest.raises(TypeError):
        hash(Mutable(1))
    assert repr(Mutable(1)) == "Mutable(a=1, b=[])"


def test_replace_runs_post_init_again_and_refuses_an_init_false_field() -> None:
    f = record.replace(Frozen(name="x"), scope=("a", "b", "c"))
    assert (f.name, f.derived) == ("x", 3)
    with pytest.raises(ValueError):
        record.replace(f, derived=1)


def test_a_field_without_default_after_one_with_is_refused_at_definition() -> None:
    with pytest.raises(TypeError):

        @dataclass
        class Bad:
            a: int = 0
            b: int


def test_the_host_dataclasses_functions_see_a_record_as_the_dataclass_it_declares() -> None:
    """Host code and tests call dataclasses.replace / asdict / fields on gate and config
    objects: they must give what record's own give."""
    f = Frozen(name="x", scope=("a",), extra={"k": 1})
    assert dataclasses.is_dataclass(f) and record.is_record(f)
    assert [x.name for x in dataclasses.fields(f)] == [x.name for x in record.fields(f)]
    assert dataclasses.asdict(f) == record.asdict(f)
    assert dataclasses.replace(f, scope=("a", "b")) == record.replace(f, scope=("a", "b"))
    assert dataclasses.replace(f, scope=("a", "b")).derived == 2
    with pytest.raises(ValueError):
        dataclasses.replace(f, derived=1)


def test_build_inits_compiles_every_lazy_init_and_changes_nothing_else():
    """A warm pool's gateway compiles them before its claim (gateway/__main__)."""

    @record.dataclass(frozen=True)
    class Point:
        x: int
        y: int = 2

    lazy = Point.__dict__["__init__"]
    assert getattr(lazy, "__record_lazy__", False)
    record.build_inits()
    built = Point.__dict__["__init__"]
    assert built is not lazy and not getattr(built, "__record_lazy__", False)
    assert Point(1) == Point(1, 2) and repr(Point(1)).endswith("Point(x=1, y=2)")
    record.build_inits()  # again: nothing left to build
    assert Point.__dict__["__init__"] is built
