"""Dataclasses for what the gateway defines at boot, at the cost of a plain class.

The gateway's boot is CPU every attempt pays (issue 25). `dataclasses` imports `inspect` (with
ast, dis, tokenize), and each class it makes compiles six generated methods: together more
than half of the boot. `dataclass` here takes the same declarations (annotations, defaults,
`field(...)`, `__post_init__`) for the subset of features the gateway and the gate use: `frozen`,
`kw_only`, and `field`'s `default`, `default_factory`, `init`, `repr` and `compare`. A class's
`__init__` is compiled the first time one is built (or by `build_inits`, which a warm pool's
gateway calls before its claim), so a class never built costs nothing; its
other methods are shared, not generated. `fields`, `asdict` and `replace` work as dataclasses'
do on these classes (asdict does not deep-copy a leaf: the leaves here are immutable JSON
values). Standard library only, nothing imported.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING; the gateway boots without typing (core/__init__)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar, dataclass_transform

    T = TypeVar("T")

FIELDS = "__record_fields__"  # the class attribute holding its fields, in order
FROZEN = "__record_frozen__"  # the class attribute saying whether it was declared frozen


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class FrozenInstanceError(AttributeError):
    """An attempt to set or delete a field of a frozen record."""


class Field:
    """One field: its name and annotation, its default (or factory), and whether __init__, repr
    and == use it."""

    __slots__ = ("name", "type", "default", "default_factory", "init", "repr", "compare", "kw_only")

    def __init__(
        self,
        default: Any,
        default_factory: Any,
        init: bool,
        repr: bool,  # noqa: A002 - dataclasses.field's name
        compare: bool,
    ) -> None:
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("cannot specify both default and default_factory")
        self.name, self.type = "", ""  # the annotation, as written (a string)
        self.default, self.default_factory = default, default_factory
        self.init, self.repr, self.compare, self.kw_only = init, repr, compare, False

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, default={self.default!r}, init={self.init})"


def field(
    *,
    default: Any = MISSING,
    default_factory: Callable[[], Any] | Any = MISSING,
    init: bool = True,
    repr: bool = True,  # noqa: A002 - dataclasses.field's name
    compare: bool = True,
) -> Any:
    return Field(default, default_factory, init, repr, compare)


def fields(obj: Any) -> tuple[Field, ...]:
    """The fields of a record or record class, in declaration order."""
    try:
        found: tuple[Field, ...] = getattr(obj, FIELDS)
    except AttributeError:
        raise TypeError("must be called with a record type or instance") from None
    return found


def is_record(obj: Any) -> bool:
    return hasattr(type(obj) if not isinstance(obj, type) else obj, FIELDS)


def is_frozen(cls: type) -> bool:
    """Whether record class `cls` was declared frozen."""
    return bool(getattr(cls, FROZEN, False))


def asdict(obj: Any) -> dict[str, Any]:
    """A record as a dict, recursively (records, lists, tuples and dicts within)."""
    if isinstance(obj, type) or not hasattr(obj, FIELDS):
        raise TypeError("asdict() should be called on record instances")
    out: dict[str, Any] = _plain(obj)
    return out


def _plain(value: Any) -> Any:
    if hasattr(type(value), FIELDS):
        return {f.name: _plain(getattr(value, f.name)) for f in getattr(value, FIELDS)}
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*[_plain(v) for v in value])
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return type(value)((_plain(k), _plain(v)) for k, v in value.items())
    return value


def replace(obj: T, /, **changes: Any) -> T:
    """A new record like `obj` with `changes`; __post_init__ runs again, as dataclasses'."""
    for f in fields(obj):
        if not f.init:
            if f.name in changes:
                raise ValueError(
                    f"field {f.name} is declared with init=False, it cannot be replaced"
                )
        elif f.name not in changes:
            changes[f.name] = getattr(obj, f.name)
    return type(obj)(**changes)


class _DataclassFields:
    """A record's `__dataclass_fields__`, for the host's `dataclasses.replace`, `asdict`, `fields`
    and `is_dataclass` (and the tests'): made on first use from the record's fields, as
    dataclasses' own Field objects of a dataclass declared alike. The gateway never reads it."""

    def __get__(self, obj: Any, cls: type) -> dict[str, Any]:
        made: dict[str, Any] | None = cls.__dict__.get("_dataclass_fields")
        if made is None:
            import dataclasses

            def spec(f: Field) -> Any:
                return dataclasses.field(
                    default=dataclasses.MISSING if f.default is MISSING else f.default,
                    default_factory=(
                        dataclasses.MISSING if f.default_factory is MISSING else f.default_factory
                    ),
                    init=f.init,
                    repr=f.repr,
                    compare=f.compare,
                    kw_only=f.kw_only,
                )

            twin = dataclasses.make_dataclass(
                cls.__name__, [(f.name, object, spec(f)) for f in getattr(cls, FIELDS)]
            )
            made = {f.name: f for f in dataclasses.fields(twin)}
            type.__setattr__(cls, "_dataclass_fields", made)
        return made


def _setattr_frozen(self: Any, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _delattr_frozen(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _repr(self: Any) -> str:
    shown = ", ".join(
        f"{f.name}={getattr(self, f.name)!r}" for f in getattr(self, FIELDS) if f.repr
    )
    return f"{type(self).__qualname__}({shown})"


def _key(self: Any) -> tuple[Any, ...]:
    return tuple(getattr(self, f.name) for f in getattr(self, FIELDS) if f.compare)


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _key(self) == _key(other)


def _hash(self: Any) -> int:
    return hash(_key(self))


def _init_source(cls: type, frozen: bool) -> tuple[str, dict[str, Any]]:
    """The source of `cls`'s __init__ and the names it uses, as dataclasses writes it."""
    names: dict[str, Any] = {"MISSING": MISSING, "_set": object.__setattr__}
    params, kw, body = ["self"], list[str](), list[str]()
    for f in getattr(cls, FIELDS):
        value = f.name
        if f.default_factory is not MISSING:
            names[f"_f_{f.name}"] = f.default_factory
            value = (
                f"_f_{f.name}()"
                if not f.init
                else f"_f_{f.name}() if {f.name} is MISSING else {f.name}"
            )
        elif not f.init and f.default is not MISSING:
            names[f"_d_{f.name}"] = f.default
            value = f"_d_{f.name}"
        elif not f.init:
            continue  # no default, not set by __init__: dataclasses leaves it unset too
        if f.init:
            if f.default_factory is not MISSING:
                param = f"{f.name}=MISSING"
            elif f.default is not MISSING:
                names[f"_d_{f.name}"] = f.default
                param = f"{f.name}=_d_{f.name}"
            else:
                param = f.name
            (kw if f.kw_only else params).append(param)
        body.append(
            f"  _set(self, {f.name!r}, {value})" if frozen else f"  self.{f.name} = {value}"
        )
    if hasattr(cls, "__post_init__"):
        body.append("  self.__post_init__()")
    signature = ", ".join(params + (["*", *kw] if kw else []))
    return f"def __init__({signature}):\n" + ("\n".join(body) or "  pass") + "\n", names


_LAZY: list[tuple[type, bool]] = []  # record classes whose __init__ may still be the lazy one


def _build_init(cls: type, frozen: bool) -> Callable[..., None]:
    """Compile `cls`'s __init__ and put it in place of the lazy one."""
    source, names = _init_source(cls, frozen)
    exec(source, names)  # noqa: S102 - our own field names, checked as identifiers
    init: Callable[..., None] = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    type.__setattr__(cls, "__init__", init)
    return init


def _lazy_init(cls: type, frozen: bool) -> Callable[..., None]:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        _build_init(cls, frozen)(self, *args, **kwargs)

    __init__.__record_lazy__ = True  # type: ignore[attr-defined]  # `build_inits` looks for it
    return __init__


def build_inits() -> None:
    """Compile now every record class's __init__ not yet built: a warm pool's gateway does it
    before its claim, so the attempt's config is not what pays for them."""
    for cls, frozen in _LAZY:
        if getattr(cls.__dict__.get("__init__"), "__record_lazy__", False):
            _build_init(cls, frozen)
    _LAZY.clear()


def _process(cls: type, frozen: bool, kw_only: bool) -> type:
    inherited = [f for base in cls.__mro__[:0:-1] for f in getattr(base, FIELDS, ())]
    own = []
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        if "ClassVar" in str(annotation) or not name.isidentifier():
            raise TypeError(f"{cls.__name__}.{name}: not a field this module supports")
        value = cls.__dict__.get(name, MISSING)
        f = value if isinstance(value, Field) else Field(value, MISSING, True, True, True)
        if isinstance(f.default, (list, dict, set)):
            raise ValueError(f"mutable default {type(f.default)} for field {name} is not allowed")
        f.name, f.type, f.kw_only = name, annotation, kw_only
        if f.default is MISSING:
            if name in cls.__dict__:
                delattr(cls, name)
        else:
            setattr(cls, name, f.default)
        own.append(f)
    by_name = {f.name: f for f in inherited}
    by_name.update((f.name, f) for f in own)
    all_fields = tuple(by_name.values())
    seen_default = False
    for f in all_fields:
        if not f.init or f.kw_only:
            continue
        if f.default is not MISSING or f.default_factory is not MISSING:
            seen_default = True
        elif seen_default:
            raise TypeError(f"non-default argument {f.name!r} follows default argument")
    methods: dict[str, Any] = {
        FIELDS: all_fields,
        FROZEN: frozen,
        "__dataclass_fields__": _DataclassFields(),
        "__init__": _lazy_init(cls, frozen),
        "__repr__": _repr,
        "__eq__": _eq,
    }
    if frozen:
        methods.update(__setattr__=_setattr_frozen, __delattr__=_delattr_frozen, __hash__=_hash)
    else:
        methods["__hash__"] = None  # mutable and compared by value: unhashable, as dataclasses'
    for name, method in methods.items():
        if name not in cls.__dict__ or name in (FIELDS, FROZEN, "__dataclass_fields__"):
            type.__setattr__(cls, name, method)
        elif name == "__hash__" and cls.__dict__[name] is None and "__eq__" not in cls.__dict__:
            type.__setattr__(cls, name, method)
    _LAZY.append((cls, frozen))
    return cls


if TYPE_CHECKING:

    @dataclass_transform(field_specifiers=(field, Field))
    def dataclass(
        cls: type[T] | None = None, /, *, frozen: bool = False, kw_only: bool = False
    ) -> Any: ...

else:

    def dataclass(cls=None, /, *, frozen=False, kw_only=False):
        """A record class of `cls`, as `dataclasses.dataclass(cls, frozen=..., kw_only=...)`."""
        if cls is None:
            return lambda c: _process(c, frozen, kw_only)
        return _process(cls, frozen, kw_only)
