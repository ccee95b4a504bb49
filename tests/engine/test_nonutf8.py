"""Lone surrogates in a client's arguments: refused wherever they are, naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledgerfs.engine import Code, LedgerError
from ledgerfs.engine.nonutf8 import escape_text, reject_surrogates

# Text that often holds a lone surrogate (one a client's JSON can carry), beside
# other characters of every kind.
characters = st.sampled_from(["a", "\u00e9", "\ud800", "\udce9", '"', "/"]) | st.characters(
    exclude_categories=()
)
# (Joined by hand: `st.text` leaves surrogates out.)
texts = st.lists(characters, max_size=6).map("".join)
scalars = texts | st.integers() | st.floats(allow_nan=False) | st.booleans() | st.none()
arguments = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)


def _lone(text: str) -> bool:
    return any(0xD800 <= ord(char) <= 0xDFFF for char in text)


def first_surrogate(value: Any, field: str = "") -> str | None:
    """Where the first string holding a lone surrogate is, in the order fields are
    written (a key before its value), named as request fields are named."""
    if isinstance(value, str):
        return (field or "the arguments") if _lone(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            name = escape_text(key)
            found = first_surrogate(key, f"{field} (a key)" if field else "a key")
            found = found or first_surrogate(item, f"{field}.{name}" if field else name)
            if found:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = first_surrogate(item, f"{field}[{index}]")
            if found:
                return found
    return None


@given(arguments)
def test_a_lone_surrogate_anywhere_is_refused_naming_its_field(value: Any) -> None:
    where = first_surrogate(value)
    if where is None:
        reject_surrogates(value)
        return
    with pytest.raises(LedgerError) as raised:
        reject_surrogates(value)
    assert raised.value.code == Code.VALIDATION
    assert raised.value.details == {"field": where, "reason": "lone_surrogate"}


@pytest.mark.parametrize(
    "value",
    [
        {"path": "a.txt", "content": b"\xff\xfe"},  # bytes are not text: nothing to refuse
        {"path": "a.txt", "when": object()},  # a value JSON cannot hold
        {("tuple", "key"): "x"},
    ],
    ids=["bytes", "object", "tuple-key"],
)
def test_values_json_cannot_hold_are_walked_and_pass_without_surrogates(value: Any) -> None:
    reject_surrogates(value)


def test_a_surrogate_beside_a_value_json_cannot_hold_is_still_named() -> None:
    with pytest.raises(LedgerError) as raised:
        reject_surrogates({"when": object(), "path": "a\ud800"})
    assert raised.value.details["field"] == "path"
