"""JSON shapes: what a value on the provider's wire may be, checked and described from one declaration.

A shape checks a value parsed from JSON (or, for a parameter, read from a path,
a query or a header) and renders itself as JSON Schema for the OpenAPI document
(`provider.openapi`): the document says what the service accepts because both
are read off the same declaration, and tests/unit/test_shapes.py holds every
shape to its schema. The checks are JSON Schema's, strictly: a boolean is not a
number, a number is not a string, an object has no property it does not
declare. A refusal (`Invalid`) never carries the value it refused.

Plain classes rather than a validation framework: the provider checks every
send's body and a run's every contract, and its start is on the path of a run's
first cell, where a framework's import would cost more than all of this.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
E = TypeVar("E", bound=Enum)

Schema = dict[str, Any]
# How a document names an object's definition (`Object.schema` asks it; the document files the definition).
Ref = Callable[["Object[Any]"], Schema]


class Invalid(ValueError):
    """A value outside its shape."""


class Shape(Protocol[T_co]):
    def check(self, value: object) -> T_co:
        """The value, as the service takes it; `Invalid` if it is not of this shape."""
        ...

    def schema(self, ref: Ref) -> Schema: ...


class TextShape(Shape[T_co], Protocol[T_co]):
    """A shape a path segment, a query's value or a header can carry."""

    def parse(self, text: str) -> T_co:
        """The value a parameter's text stands for; `Invalid` if it stands for none."""
        ...


@dataclass(frozen=True, slots=True)
class Text:
    """A string of `min_length` to `max_length` characters, all of it matching `pattern` if given."""

    min_length: int = 0
    max_length: int | None = None
    pattern: str | None = None
    _max: int = field(init=False, repr=False, compare=False)
    _whole: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_max", sys.maxsize if self.max_length is None else self.max_length)
        object.__setattr__(self, "_whole", None if self.pattern is None else re.compile(self.pattern))

    def check(self, value: object) -> str:
        if type(value) is not str or not self.min_length <= len(value) <= self._max:
            raise Invalid
        if self._whole is not None and self._whole.fullmatch(value) is None:
            raise Invalid
        if not value.isascii():
            try:
                value.encode()
            except UnicodeEncodeError:  # a lone surrogate, from a JSON escape: no text at all
                raise Invalid from None
        return value

    def parse(self, text: str) -> str:
        return self.check(text)

    def schema(self, ref: Ref) -> Schema:
        schema: Schema = {"type": "string"}
        if self.min_length:
            schema["minLength"] = self.min_length
        if self.max_length is not None:
            schema["maxLength"] = self.max_length
        if self.pattern is not None:
            schema["pattern"] = f"^{self.pattern}$"
        return schema


@dataclass(frozen=True, slots=True)
class Flag:
    def check(self, value: object) -> bool:
        if type(value) is not bool:
            raise Invalid
        return value

    def schema(self, ref: Ref) -> Schema:
        return {"type": "boolean"}


@dataclass(frozen=True, slots=True)
class Number:
    """A finite number within its bounds, taken as a float."""

    minimum: float | None = None
    exclusive_minimum: float | None = None
    maximum: float | None = None

    def check(self, value: object) -> float:
        if type(value) is not float and type(value) is not int:
            raise Invalid
        try:
            number = float(value)
        except OverflowError:  # an integer past any float
            raise Invalid from None
        if not math.isfinite(number) or (self.maximum is not None and number > self.maximum):
            raise Invalid
        if (self.minimum is not None and number < self.minimum) or (
            self.exclusive_minimum is not None and number <= self.exclusive_minimum
        ):
            raise Invalid
        return number

    def schema(self, ref: Ref) -> Schema:
        schema: Schema = {"type": "number"}
        for name, bound in (
            ("minimum", self.minimum),
            ("exclusiveMinimum", self.exclusive_minimum),
            ("maximum", self.maximum),
        ):
            if bound is not None:
                schema[name] = bound
        return schema


@dataclass(frozen=True, slots=True)
class Integer:
    """A whole number from `minimum` to `maximum` (in JSON, 2.0 is one too, as JSON Schema reads it)."""

    minimum: int
    maximum: int
    _digits: int = field(init=False, repr=False, compare=False)  # the most a parameter's text may have

    def __post_init__(self) -> None:
        object.__setattr__(self, "_digits", len(str(self.maximum)))

    def check(self, value: object) -> int:
        if type(value) is float and value.is_integer():
            value = int(value)
        if type(value) is not int or not self.minimum <= value <= self.maximum:
            raise Invalid
        return value

    def parse(self, text: str) -> int:
        """Decimal digits only: no sign, no space, no fraction."""
        if not (text.isascii() and text.isdigit()) or len(text) > self._digits:
            raise Invalid
        value = int(text)
        if not self.minimum <= value <= self.maximum:
            raise Invalid
        return value

    def schema(self, ref: Ref) -> Schema:
        return {"type": "integer", "minimum": self.minimum, "maximum": self.maximum}


@dataclass(frozen=True, slots=True)
class Choice(Generic[E]):
    """One of a string enumeration's values, taken as its member."""

    enum: type[E]
    _members: Mapping[object, E] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_members", {member.value: member for member in self.enum})

    def check(self, value: object) -> E:
        member = self._members.get(value) if type(value) is str else None
        if member is None:
            raise Invalid
        return member

    def schema(self, ref: Ref) -> Schema:
        schema: Schema = {"type": "string", "enum": list(self._members), "title": self.enum.__name__}
        if self.enum.__doc__ and not self.enum.__doc__.startswith("An enumeration"):
            schema["description"] = self.enum.__doc__.strip()
        return schema


@dataclass(frozen=True, slots=True)
class Items(Generic[T]):
    item: Shape[T]
    max_items: int | None = None

    def check(self, value: object) -> list[T]:
        if type(value) is not list or (self.max_items is not None and len(value) > self.max_items):
            raise Invalid
        return [self.item.check(v) for v in value]

    def schema(self, ref: Ref) -> Schema:
        schema: Schema = {"type": "array", "items": self.item.schema(ref)}
        if self.max_items is not None:
            schema["maxItems"] = self.max_items
        return schema


@dataclass(frozen=True, slots=True)
class Nullable(Generic[T]):
    inner: Shape[T]

    def check(self, value: object) -> T | None:
        return None if value is None else self.inner.check(value)

    def schema(self, ref: Ref) -> Schema:
        return {"anyOf": [self.inner.schema(ref), {"type": "null"}]}


@dataclass(frozen=True, slots=True)
class Table(Generic[T]):
    """An object whose every property (any name) has the value's shape."""

    value: Shape[T]

    def check(self, value: object) -> dict[str, T]:
        if type(value) is not dict:
            raise Invalid
        return {name: self.value.check(v) for name, v in value.items()}

    def schema(self, ref: Ref) -> Schema:
        return {"type": "object", "additionalProperties": self.value.schema(ref)}


@dataclass(frozen=True, slots=True)
class AnyJson:
    """Any JSON value at all."""

    def check(self, value: object) -> object:
        return value

    def schema(self, ref: Ref) -> Schema:
        return {}


class _Mark:
    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


# A property's default when it has none: it must be there (REQUIRED), or may be left out (ABSENT).
REQUIRED: Any = _Mark("REQUIRED")
ABSENT: Any = _Mark("ABSENT")


@dataclass(frozen=True, slots=True)
class Property:
    name: str
    shape: Shape[Any]
    default: Any = REQUIRED
    description: str = ""


def as_dict(checked: dict[str, Any]) -> dict[str, Any]:
    return checked


@dataclass(frozen=True, slots=True)
class Object(Generic[T]):
    """A JSON object with these properties (the absent ones take their default), made into
    what the service takes by `build`; `closed`: no other property. Named: the document
    defines it once, under its name, and refers to it from everywhere it is used."""

    name: str
    properties: tuple[Property, ...]
    build: Callable[[dict[str, Any]], T]
    closed: bool = True
    description: str = ""
    _names: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_names", frozenset(p.name for p in self.properties))

    def check(self, value: object) -> T:
        if type(value) is not dict or (self.closed and not self._names.issuperset(value)):
            raise Invalid
        checked = {}
        for prop in self.properties:
            if prop.name in value:
                checked[prop.name] = prop.shape.check(value[prop.name])
            elif prop.default is REQUIRED:
                raise Invalid
            elif prop.default is not ABSENT:
                checked[prop.name] = prop.default
        return self.build(checked)

    def schema(self, ref: Ref) -> Schema:
        return ref(self)

    def definition(self, ref: Ref) -> Schema:
        """The object's own schema, with the objects it holds referred to through `ref`."""
        properties: Schema = {}
        for prop in self.properties:
            schema = properties[prop.name] = prop.shape.schema(ref)
            if prop.default is not REQUIRED and prop.default is not ABSENT:
                schema["default"] = prop.default
            if prop.description:
                schema["description"] = prop.description
        schema = {"type": "object", "title": self.name, "properties": properties}
        required = [p.name for p in self.properties if p.default is REQUIRED]
        if required:
            schema["required"] = required
        if self.closed:
            schema["additionalProperties"] = False
        if self.description:
            schema["description"] = self.description
        return schema


@dataclass(frozen=True, slots=True)
class JsonText(Generic[T]):
    """A parameter whose text is JSON of the inner shape, of at most `max_length` characters."""

    inner: Shape[T]
    max_length: int

    def parse(self, text: str) -> T:
        if len(text) > self.max_length:
            raise Invalid
        try:
            value = json.loads(text)
        except ValueError:
            raise Invalid from None
        return self.inner.check(value)

    def check(self, value: object) -> T:
        return self.inner.check(value)

    def schema(self, ref: Ref) -> Schema:
        return self.inner.schema(ref)
