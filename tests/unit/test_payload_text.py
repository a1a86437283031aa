"""The JSON text stored for arguments and values: what `json` itself writes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from due.errors import PayloadError
from due.payload import encode_arguments, encode_value

VALUES: list[Any] = [
    "plain",
    "émoji 🎉 and \u2028 and \\u0000 spelled out",
    'quotes " and \\ and \n',
    0,
    -(2**80),
    1.5,
    1e-300,
    0.1 + 0.2,
    True,
    None,
    [],
    {},
    [1, [2, [3, {"a": (4, 5)}]]],
    {"b": 1, "a": {"c": None}, 3: "int key", 2.5: "float key", True: "bool key", None: "none"},
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_text_is_what_json_writes(value: Any) -> None:
    expected = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    assert encode_value(value, "the value") == expected
    arguments = encode_arguments("t", (value,), {"k": value}, 1 << 20)
    assert json.loads(arguments) == json.loads(
        json.dumps({"args": [value], "kwargs": {"k": value}})
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (float("nan"), "Out of range float values are not JSON compliant"),
        (float("inf"), "Out of range float values are not JSON compliant"),
        ({1, 2}, "Object of type set is not JSON serializable"),
        ({(1, 2): "tuple key"}, "keys must be str, int, float, bool or None"),
        (object(), "Object of type object is not JSON serializable"),
    ],
)
def test_what_json_cannot_hold_is_named(value: Any, message: str) -> None:
    with pytest.raises(PayloadError, match=message):
        encode_value([value], "the value")


def test_a_circular_value_is_named_not_a_recursion_error() -> None:
    circular: dict[str, Any] = {}
    circular["self"] = circular
    with pytest.raises(PayloadError, match="Circular reference detected"):
        encode_value(circular, "the value")
