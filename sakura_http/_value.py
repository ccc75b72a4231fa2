"""`Value`: the `__eq__`, `__hash__` and `__repr__` of the package's dataclasses, written once.

``@dataclass`` compiles those three methods from source text for every class it decorates,
when the class is defined: about a millisecond a class on Python 3.11, which every
``import sakura_http`` (and so every test run with the plugin) paid for each of the public
values on its import path.  A dataclass declared ``eq=False, repr=False`` that derives from
`Value` gets these shared methods instead, which behave as the generated ones do:

* ``==`` compares the fields with ``compare=True``, and only with an object of exactly the
  same class (else `NotImplemented`): as a tuple before Python 3.13, which takes an object as
  equal to itself; field by field since, after taking an object as equal to itself (two
  values holding one NaN object differ there);
* ``hash()`` hashes the fields that take part in it (``hash=`` if given, else ``compare=``);
  a class that is not frozen sets ``__hash__ = None`` itself, as ``@dataclass`` would;
* ``repr()`` shows the fields with ``repr=True`` as ``Name(field=value, ...)``, and ``...``
  for an object met again inside itself.

A method the class defines itself wins, as it would over a generated one.  tests/test_value.py
holds every such class to the methods ``@dataclass`` would have generated for it.
"""

from __future__ import annotations

import dataclasses
import operator
import reprlib
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["Value"]


class Value:
    """A base for dataclasses declared ``eq=False, repr=False`` (see the module docstring)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        compared = _shape(self)[0]
        if _FIELD_BY_FIELD:
            pairs = zip(compared(self), compared(other), strict=True)
            return self is other or all(a == b for a, b in pairs)
        return compared(self) == compared(other)  # type: ignore[no-any-return]

    def __hash__(self) -> int:
        return hash(_shape(self)[1](self))

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in _shape(self)[2])
        return f"{self.__class__.__qualname__}({shown})"


_FIELD_BY_FIELD = sys.version_info >= (3, 13)  # how `@dataclass` writes `__eq__` here
_Shape = tuple[Callable[[Any], Any], Callable[[Any], Any], tuple[str, ...]]
_SHAPES: dict[type, _Shape] = {}


def _shape(value: Any) -> _Shape:
    """For the dataclass of `value`: getters of the values of its compared and of its hashed
    fields (each a tuple), and the names of the fields its repr shows."""
    cls = value.__class__
    shape = _SHAPES.get(cls)
    if shape is None:
        fields = dataclasses.fields(cls)
        shape = _SHAPES[cls] = (
            _values([f.name for f in fields if f.compare]),
            _values([f.name for f in fields if (f.compare if f.hash is None else f.hash)]),
            tuple(f.name for f in fields if f.repr),
        )
    return shape


def _values(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """The values of the attributes `names` of an object, as a tuple."""
    if len(names) > 1:
        return operator.attrgetter(*names)
    return lambda obj: tuple(getattr(obj, name) for name in names)
