"""Arrays of batch statements, sent in binary without a Python step per element.

Every batch statement (an acknowledgement, a heartbeat, a bulk insert) sends
its rows as one array per column (`%(id)b::bigint[]`). psycopg dumps a list
element by element in Python, and first scans it to choose the element type:
for an acknowledgement of 100 jobs, 11 arrays cost the worker about 3 us a
job, a tenth of what its loop spends on a job beside the handler. Flat lists
of ints, floats or strings (each with None among them) are the only arrays due
sends, and their binary form is a fixed header followed by each element's
length and bytes: built here from `array` and `struct` in C. Anything else (an
empty list, nested or mixed lists, bools, ints beyond 64 bits) is dumped by
psycopg as before.

The statements cast every array they take (`::bigint[]`, `::int[]`,
`::float8[]`, `::text[]`...), so the element types chosen here (int8 for ints,
text for a list of Nones) need no match but a cast. Registered only on due's
own connections (`ADAPTERS`): a caller's connection, or one lent to a
handler's transaction, keeps psycopg's defaults.
"""

from __future__ import annotations

import struct
from array import array
from typing import Any

import psycopg
from psycopg import adapt, postgres
from psycopg.pq import Format
from psycopg.types.array import BaseListDumper, ListBinaryDumper, ListDumper

_INT8 = postgres.types["int8"]
_FLOAT8 = postgres.types["float8"]
_TEXT = postgres.types["text"]
_pack_head = struct.Struct("!iIIii").pack
"""Dimensions (1), has NULLs, element type, length, lower bound (1)."""
_pack_length = struct.Struct("!i").pack
_NULL = b"\xff\xff\xff\xff"
_EIGHT = b"\x00\x00\x00\x08"
INT8_MIN, INT8_MAX = -(2**63), 2**63 - 1


def _eight_byte_elements(code: str, values: list[Any]) -> bytes:
    """Each value as its length (8) and its 8 big-endian bytes, in C: the values'
    bytes and the lengths interleaved as 32-bit words through slice assignment."""
    count = len(values)
    packed = array(code, values)
    packed.byteswap()
    words = array("I", packed.tobytes())
    elements = array("I", bytes(12 * count))
    elements[0::3] = array("I", _EIGHT * count)
    elements[1::3] = words[0::2]
    elements[2::3] = words[1::2]
    return elements.tobytes()


_PACK_ELEMENT = {code: struct.Struct("!i" + code).pack for code in ("q", "d")}


def _nullable_eight_byte_elements(code: str, values: list[Any]) -> bytes:
    pack = _PACK_ELEMENT[code]
    return b"".join(_NULL if value is None else pack(8, value) for value in values)


class _EightByteArrayDumper(BaseListDumper):
    format = Format.BINARY
    code = ""
    element_oid = 0

    def dump(self, obj: list[Any]) -> bytes:
        if None in obj:
            body = _nullable_eight_byte_elements(self.code, obj)
            return _pack_head(1, 1, self.element_oid, len(obj), 1) + body
        return _pack_head(1, 0, self.element_oid, len(obj), 1) + _eight_byte_elements(
            self.code, obj
        )


class _Int8ArrayDumper(_EightByteArrayDumper):
    oid = _INT8.array_oid
    code = "q"
    element_oid = _INT8.oid


class _Float8ArrayDumper(_EightByteArrayDumper):
    oid = _FLOAT8.array_oid
    code = "d"
    element_oid = _FLOAT8.oid


class _TextArrayDumper(BaseListDumper):
    """Strings (or only Nones) as text[]. A batch repeats few values (one state,
    one outcome, NULLs), so each distinct value is encoded once."""

    format = Format.BINARY
    oid = _TEXT.array_oid

    def dump(self, obj: list[Any]) -> bytes:
        distinct = set(obj)
        head = _pack_head(1, 1 if None in distinct else 0, _TEXT.oid, len(obj), 1)
        if len(distinct) == 1:
            return head + _text_element(distinct.pop()) * len(obj)
        elements = {value: _text_element(value) for value in distinct}
        return head + b"".join(map(elements.__getitem__, obj))


def _text_element(value: str | None) -> bytes:
    if value is None:
        return _NULL
    encoded = value.encode()  # a lone surrogate raises here, as in psycopg's dumper
    return _pack_length(len(encoded)) + encoded


_FLAT_DUMPERS: dict[type, type[BaseListDumper]] = {
    int: _Int8ArrayDumper,
    float: _Float8ArrayDumper,
    str: _TextArrayDumper,
}


def _flat_kind(obj: list[Any]) -> type | None:
    """The element type of a flat list this module dumps, or None for psycopg."""
    kinds = set(map(type, obj))
    kinds.discard(type(None))
    if not kinds:
        return str if obj else None  # only Nones: a text[] of NULLs
    if len(kinds) != 1:
        return None
    kind = kinds.pop()
    if kind is int:
        present = [value for value in obj if value is not None] if None in obj else obj
        if min(present) < INT8_MIN or max(present) > INT8_MAX:
            return None
    return kind if kind in _FLAT_DUMPERS else None


class FlatListBinaryDumper(ListBinaryDumper):
    """psycopg's binary list dumper, with flat lists of ints, floats or strings
    dumped by the dumpers above."""

    def get_key(self, obj: list[Any], format: adapt.PyFormat) -> Any:
        kind = _flat_kind(obj)
        if kind is None:
            return super().get_key(obj, format)
        return (list, kind)

    def upgrade(self, obj: list[Any], format: adapt.PyFormat) -> BaseListDumper:
        kind = _flat_kind(obj)
        if kind is None:
            return super().upgrade(obj, format)
        return _FLAT_DUMPERS[kind](list, self._tx)


def _adapters() -> adapt.AdaptersMap:
    adapters = adapt.AdaptersMap(psycopg.adapters)
    adapters.register_dumper(list, FlatListBinaryDumper)
    # Registered again after it, so that `%s` (format chosen by psycopg) keeps
    # the text dumper, as psycopg's own defaults do; `%b` takes the one above.
    adapters.register_dumper(list, ListDumper)
    return adapters


ADAPTERS = _adapters()
"""The adapters of due's own connections (`context=` when they connect)."""
