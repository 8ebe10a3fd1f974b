"""Each shape the provider checks a request with accepts exactly what its JSON Schema (the
document's) allows: random values around every bound, and any JSON at all, checked both ways."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from provider import wire
from provider.shapes import Choice, Flag, Integer, Invalid, Items, Number, Object, Schema, Shape, Text

any_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


def near(shape: Shape[Any]) -> st.SearchStrategy[Any]:
    """Values on both sides of what the shape accepts."""
    if isinstance(shape, Text):
        low = st.integers(max(0, shape.min_length - 1), shape.min_length + 1)
        high = st.integers(shape.max_length - 1, shape.max_length + 1) if shape.max_length is not None else low
        lengths = low | high
        return lengths.flatmap(lambda n: st.text(min_size=n, max_size=n) if n < 50 else st.just("é" * n))
    if isinstance(shape, Number):
        bounds = [b for b in (shape.minimum, shape.exclusive_minimum, shape.maximum) if b is not None]
        edges = [b + d for b in bounds for d in (-1, -1e-9, 0, 1e-9, 1)]
        return st.sampled_from(edges or [0.0]) | st.floats(allow_nan=False, allow_infinity=False) | st.integers()
    if isinstance(shape, Integer):
        whole = st.sampled_from([shape.minimum - 1, shape.minimum, shape.maximum, shape.maximum + 1])
        return whole | whole.map(float) | st.integers(shape.minimum, shape.maximum) | st.floats()
    if isinstance(shape, Flag):
        return st.booleans() | st.integers(0, 1)
    if isinstance(shape, Choice):
        return st.sampled_from([m.value for m in shape.enum]) | st.text(max_size=3)
    if isinstance(shape, Items):
        sizes = [0, 1, 2] + ([shape.max_items, shape.max_items + 1] if shape.max_items is not None else [])
        few = st.lists(near(shape.item), max_size=2)
        return few | st.sampled_from(sizes).map(lambda n: ["x"] * n)
    if isinstance(shape, Object):
        properties = {p.name: near(p.shape) for p in shape.properties}
        extra = st.dictionaries(st.text(max_size=3), any_json, max_size=1)
        return st.builds(lambda given, more: {**more, **given}, st.fixed_dictionaries({}, optional=properties), extra)
    raise AssertionError(f"no values near {shape}")


def inline(obj: Object[Any]) -> Schema:
    """Each object's definition in place: a schema that stands alone."""
    return obj.definition(inline)


def accepts(shape: Shape[Any], value: object) -> bool:
    try:
        shape.check(value)
    except Invalid:
        return False
    return True


SHAPES = [wire.SEND_BODY, wire.CONTRACT_BODY, wire.CLOCK_BODY, wire.SCOPE_BODY, wire.AUDIT_BODY, wire.HIT_HEADER.inner]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_a_shape_accepts_what_its_schema_allows(shape: Object[Any]) -> None:
    validator = Draft202012Validator(shape.schema(inline))

    @settings(max_examples=200, deadline=None)
    @given(value=near(shape) | any_json)
    def agree(value: object) -> None:
        assert accepts(shape, value) == validator.is_valid(value), value

    agree()


def test_what_a_shape_makes_of_a_value() -> None:
    contract = wire.CONTRACT_BODY.check({"retention_seconds": 5})
    assert (contract.retention_seconds, contract.dedup) == (5.0, True)  # a number as a float, the defaults filled in
    assert wire.CLOCK_BODY.check({"advance_seconds": 2}) == 2.0
    assert (
        wire.HIT_HEADER.parse(
            '{"hit":"h","cell":"c","op":"o","attempt":1,"boundary":"after-effect","fault":"kill","pid":1,"worker":"w"}'
        ).boundary
        == "after-effect"
    )


@pytest.mark.parametrize(
    ("shape", "value"),
    [
        (Text(), "\ud800"),  # a lone surrogate (a JSON escape can make one): no text
        (Flag(), 1),
        (Number(), True),
        (Number(), 10**400),
        (Integer(0, 10), 1.5),
        (Items(Text(), 1), ["a", "b"]),
    ],
)
def test_values_no_schema_check_reaches(shape: Shape[Any], value: object) -> None:
    assert not accepts(shape, value)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", 1),
        ("007", 7),
        ("1000000", 1_000_000),
        ("0", None),
        ("+1", None),
        (" 1", None),
        ("1.0", None),
        ("1e3", None),
        ("\u0661", None),
        ("9" * 5000, None),
    ],
)
def test_an_integer_parameter_is_decimal_digits(text: str, value: int | None) -> None:
    if value is None:
        with pytest.raises(Invalid):
            wire.ATTEMPT.parse(text)
    else:
        assert wire.ATTEMPT.parse(text) == value


def test_a_refusal_says_nothing_of_the_value() -> None:
    with pytest.raises(Invalid) as refused:
        wire.SEND_BODY.check({"reference": "SECRET" * 100})
    assert "SECRET" not in str(refused.value) + repr(refused.value)
