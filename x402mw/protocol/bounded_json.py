"""JSON from outside, parsed within a depth and a size limit that hold whatever the recursion limit is.

CPython's JSON parser descends in C once per nested array or object and guards that descent with
the interpreter's recursion limit. Importing the chain libraries (py-evm, py_ecc) raises that limit
to 100,000, so a body nested some 70,000 levels deep (420 KB of ``{"a":``) exhausts the C stack and
kills the process with a segmentation fault before ``RecursionError`` could be raised. `loads`
therefore measures the nesting before the parser runs and refuses what is too deep or too large with
`JsonLimitError`. The measure costs two ``bytes.count`` calls for ordinary documents, whose brackets
are fewer than the limit; past that, a few C-speed passes over the document.

::

    loads(b'{"a": [1, 2]}', max_bytes=1024)        # {'a': [1, 2]}
    loads(b"[" * 100)                               # JsonLimitError: code "json_too_deep"
"""

from __future__ import annotations

import functools
import itertools
import json
import operator
import re
from collections.abc import Callable
from typing import Any, Literal

MAX_DEPTH = 64
"""Arrays and objects nested deeper than this are refused: no message of x402 or of the platform's
API comes near it (the deepest nest about five levels), and every parser and validator copes with it."""

# One JSON string, or an unterminated one up to the end: a match never fails once it starts at a
# quote, so a document of many stray quotes still costs one linear pass (no retry from each quote).
# `\\.?` takes an escape with its character, or a backslash that ends the document.
_STRING = re.compile(rb'"[^"\\]*(?:\\.?[^"\\]*)*(?:"|\Z)', re.DOTALL)
_BRACKETS = b"[]{}"
_OTHER_BYTES = bytes(byte for byte in range(256) if byte not in _BRACKETS)
_NOT_MARKS = bytes(byte for byte in range(256) if byte not in b'[]{}"')
_PARENS = bytes.maketrans(_BRACKETS, b"()()")
_STEPS = bytes.maketrans(b"()", b"\x02\x00")  # an opening bracket counts 2, a closing 0


class JsonLimitError(ValueError):
    """JSON over a limit. ``code`` is ``json_too_deep`` or ``json_too_large``; ``limit`` is the limit
    that was passed (levels or bytes). A ``ValueError``, as any other JSON that cannot be read."""

    def __init__(self, message: str, *, code: Literal["json_too_deep", "json_too_large"], limit: int) -> None:
        super().__init__(message)
        self.code = code
        self.limit = limit


def _outside_strings(document: bytes) -> bytes:
    if b"\\" in document:
        return _STRING.sub(b"", document)
    # No escapes: the quotes alone delimit the strings. Keep quotes and brackets only; a string
    # without brackets is then two adjacent quotes. If dropping those (left to right) leaves no
    # quote, no string held a bracket, and what is left is the brackets outside strings.
    marks = document.translate(None, _NOT_MARKS).replace(b'""', b"")
    if b'"' not in marks:
        return marks
    return b"".join(document.split(b'"')[::2])


def _depth(parens: bytes) -> int:
    # The depth after the n-th bracket is (sum of the first n steps) - n; all of it runs in C.
    return max(map(operator.sub, itertools.accumulate(parens.translate(_STEPS)), itertools.count(1)), default=0)


def nesting_depth(document: bytes) -> int:
    """The deepest nesting of arrays and objects in UTF-8 JSON ``document``, brackets in strings aside.

    For JSON it is exact. For text that is not JSON it is at least the depth a parser reaches before
    it stops at the first error: up to there, strings are delimited as the parser delimits them."""
    return _depth(_outside_strings(document).translate(_PARENS, _OTHER_BYTES))


def _deeper_than(document: bytes, limit: int) -> bool:
    parens = left = _outside_strings(document).translate(_PARENS, _OTHER_BYTES)
    # Each pass drops the innermost pairs: JSON within the limit is gone after as many passes as it
    # is deep, in a few C-speed passes. Anything else is measured bracket by bracket.
    for _ in range(limit):
        inner_gone = left.replace(b"()", b"")
        if not inner_gone:
            return False
        if len(inner_gone) == len(left):
            break
        left = inner_gone
    return _depth(parens) > limit


def _utf8(document: bytes) -> bytes:
    """``document`` in UTF-8, as `json.loads` will read it (it also takes UTF-16 and UTF-32)."""
    encoding = json.detect_encoding(document)
    if encoding in ("utf-8", "utf-8-sig"):
        return document
    return document.decode(encoding, "surrogatepass").encode("utf-8", "surrogatepass")


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


@functools.lru_cache(maxsize=8)
def _decoder(parse_float: Callable[[str], Any] | None) -> json.JSONDecoder:
    # Built once per float parser: `json.loads` builds a decoder per call when given any option.
    return json.JSONDecoder(parse_float=parse_float, parse_constant=_no_constants)


def loads(
    document: bytes | bytearray | str,
    *,
    max_depth: int = MAX_DEPTH,
    max_bytes: int | None = None,
    parse_float: Callable[[str], Any] | None = None,
) -> Any:
    """`json.loads` within limits: `JsonLimitError` when ``document`` is larger than ``max_bytes``
    (``None``: no size limit; a ``str`` is measured in UTF-8) or nests arrays and objects deeper than
    ``max_depth``; ``ValueError`` (``json.JSONDecodeError``, ``UnicodeDecodeError``) when it is not
    JSON. ``NaN`` and ``Infinity``, which are not JSON, are refused too. ``parse_float`` is
    `json.loads`'s."""
    raw = document.encode("utf-8", "surrogatepass") if isinstance(document, str) else bytes(document)
    if max_bytes is not None and len(raw) > max_bytes:
        raise JsonLimitError(f"JSON is larger than {max_bytes} bytes", code="json_too_large", limit=max_bytes)
    if raw.count(b"[") + raw.count(b"{") > max_depth and _deeper_than(_utf8(raw), max_depth):
        raise JsonLimitError(f"JSON is nested more than {max_depth} levels deep", code="json_too_deep", limit=max_depth)
    if isinstance(document, str):
        if document.startswith("\ufeff"):
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", document, 0)
        text = document
    else:
        text = raw.decode(json.detect_encoding(raw), "surrogatepass")
    return _decoder(parse_float).decode(text)
