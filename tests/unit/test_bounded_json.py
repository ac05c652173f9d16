"""`x402mw.protocol.bounded_json`: depth and size limits checked before the parser runs."""

from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal

import pytest

from x402mw.protocol.bounded_json import MAX_DEPTH, JsonLimitError, loads, nesting_depth


def nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


def test_ordinary_documents_parse_as_json_loads_parses_them() -> None:
    document = b'{"a": [1, 2.5, "x", {"b": null}], "c": true, "d": "\\u00e9\\"[{"}'
    assert loads(document) == json.loads(document)
    assert loads(document.decode()) == json.loads(document)


def test_the_depth_limit_is_exact() -> None:
    assert loads(nested(MAX_DEPTH)) is not None
    assert loads(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) is not None
    with pytest.raises(JsonLimitError) as caught:
        loads(nested(MAX_DEPTH + 1))
    assert caught.value.code == "json_too_deep" and caught.value.limit == MAX_DEPTH
    assert str(caught.value) == f"JSON is nested more than {MAX_DEPTH} levels deep"
    with pytest.raises(JsonLimitError):
        loads(b"[" * 3 + b"]" * 3, max_depth=2)
    assert loads(b"[" * 3 + b"]" * 3, max_depth=3) == [[[]]]


def test_many_shallow_containers_are_not_deep() -> None:
    assert len(loads(b"[" + b",".join([b"[{}]"] * 10_000) + b"]")) == 10_000


@pytest.mark.parametrize(
    "document",
    [
        b'{"a": "' + b"[" * 100 + b'"}',  # brackets in a string
        b'["\\"' + b"{" * 100 + b'", 1]',  # after an escaped quote, still in the string
        b'["\\\\", "' + b"[" * 100 + b'"]',  # an escaped backslash ends before the quote
    ],
)
def test_brackets_in_strings_do_not_count(document: bytes) -> None:
    assert loads(document) == json.loads(document)


def test_brackets_after_a_string_with_escapes_count() -> None:
    with pytest.raises(JsonLimitError):
        loads(b'["\\\\", ' + b"[" * 100 + b"]" * 101)
    with pytest.raises(JsonLimitError):
        loads(b'["\\"", ' + b"[" * 100)


def test_text_that_is_not_json_is_a_value_error_even_when_deep() -> None:
    with pytest.raises(ValueError) as caught:
        loads(b'"' + b"[" * 100)  # one unterminated string: the parser never descends
    assert not isinstance(caught.value, JsonLimitError)
    with pytest.raises(JsonLimitError):
        loads(b"[" * 100)  # unclosed, but the parser would descend 100 levels before noticing
    for document in (b"", b"{", b"\xff\xfe\xfd", b"[1,]", b"NaN", b"[Infinity]", b"-Infinity"):
        with pytest.raises(ValueError):
            loads(document)


def test_other_unicode_encodings_are_measured_as_decoded() -> None:
    deep = nested(MAX_DEPTH + 1).decode()
    for encoding in ("utf-16", "utf-16-le", "utf-32-be"):
        with pytest.raises(JsonLimitError):
            loads(deep.encode(encoding))
        assert loads('["[[[", {"a": 1}]'.encode(encoding)) == ["[[[", {"a": 1}]


def test_the_size_limit_counts_utf8_bytes() -> None:
    assert loads(b'"' + b"x" * 98 + b'"', max_bytes=100) == "x" * 98
    with pytest.raises(JsonLimitError) as caught:
        loads(b'"' + b"x" * 99 + b'"', max_bytes=100)
    assert caught.value.code == "json_too_large" and caught.value.limit == 100
    with pytest.raises(JsonLimitError):
        loads('"' + "é" * 50 + '"', max_bytes=100)  # 50 characters, 102 bytes


def test_floats_are_read_by_the_parser_given() -> None:
    assert loads(b'{"amount": 0.1}', parse_float=Decimal) == {"amount": Decimal("0.1")}
    assert loads(b"[0.1]") == [0.1]


def test_nesting_depth() -> None:
    assert [nesting_depth(d) for d in (b"1", b"[]", b"[[], {}]", b'{"a": [{"b": "]]]"}]}')] == [0, 1, 2, 3]


def test_the_limit_holds_where_the_chain_libraries_raised_the_recursion_limit() -> None:
    """In a process that imported py-evm (recursion limit 100,000), a 70,000-deep document is refused
    instead of overflowing the C stack (where plain `json.loads` dies of a segmentation fault)."""
    script = (
        "import sys, eth; from x402mw.protocol.bounded_json import loads, JsonLimitError\n"
        "assert sys.getrecursionlimit() >= 100000\n"
        "document = b'{\"a\":' * 70000 + b'1' + b'}' * 70000\n"
        "try:\n    loads(document)\nexcept JsonLimitError as exc:\n    print(exc.code)\n"
    )
    bounded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert (bounded.returncode, bounded.stdout.strip()) == (0, "json_too_deep"), bounded.stderr
