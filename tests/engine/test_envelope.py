"""The error envelope against docs/envelope.md: every code, its keys, retryable and recovery."""

from __future__ import annotations

import json
import re
from pathlib import Path

import msgspec
import pytest

from ledgerfs.engine import RULES, Code, LedgerError

DOCS = Path(__file__).resolve().parents[2] / "docs" / "envelope.md"
KEYS = {"code", "message", "path", "details", "suggestion", "retryable", "recovery"}
OCC_KEYS = KEYS | {"expected_hash", "current_hash", "conflict"}
# The reference's `retryable` column: "reads only" is the issue tools' per-call rule.
RETRYABLE = {"yes": (True, None), "no": (False, None), "reads only": (False, True)}


class DocRow(msgspec.Struct, frozen=True):
    code: str
    when: str
    retryable: str
    recovery: str


def doc_rows() -> list[DocRow]:
    """The rows of the code table in docs/envelope.md, the repository's copy of the contract."""
    section = DOCS.read_text(encoding="utf-8").split("\n## Codes\n", 1)[1]
    found = re.findall(
        r"^\| `([A-Z_]+)` \| (.*?) \| (yes|no|reads only) \| `(\w+)` \|", section, re.MULTILINE
    )
    return [DocRow(*row) for row in found]


def test_the_code_table_has_exactly_the_documented_codes() -> None:
    codes = [row.code for row in doc_rows()]
    assert len(codes) == 36
    assert [c.value for c in Code] == codes
    assert set(RULES) == set(Code)


@pytest.mark.parametrize("row", doc_rows(), ids=lambda row: row.code)
def test_retryable_and_recovery_follow_the_reference(row: DocRow) -> None:
    rule = RULES[Code(row.code)]
    assert (rule.retryable, rule.retryable_read) == RETRYABLE[row.retryable]
    assert rule.recovery == row.recovery
    body = LedgerError(Code(row.code)).envelope.error
    assert (body.retryable, body.recovery) == (rule.retryable, row.recovery)


def test_only_the_rebase_codes_are_retryable() -> None:
    # The contract's rule in prose: retryable true only for these three filesystem codes.
    retryable = {row.code for row in doc_rows() if row.retryable == "yes"}
    assert retryable == {"OCC_MISMATCH", "HASH_REQUIRED", "STALE_GIT"}


@pytest.mark.parametrize("code", list(Code), ids=str)
def test_every_code_serialises_to_exactly_the_spec_keys(code: Code) -> None:
    envelope = json.loads(LedgerError(code, path="/w/f.txt").envelope.to_json())
    assert set(envelope) == {"error"}
    body = envelope["error"]
    assert set(body) == (OCC_KEYS if code is Code.OCC_MISMATCH else KEYS)
    assert body["code"] == code.value
    assert body["message"] and body["suggestion"]
    assert isinstance(body["details"], dict)
    assert body["path"] == "/w/f.txt"


@pytest.mark.parametrize(
    ("code", "read", "retryable"),
    [
        (Code.GH_RATE_LIMIT, True, True),
        (Code.GH_RATE_LIMIT, False, False),
        (Code.GH_NETWORK, True, True),
        (Code.GH_NETWORK, False, False),
        (Code.GL_NETWORK, True, True),
        (Code.GL_NETWORK, False, False),
        (Code.GH_FORBIDDEN, True, False),
        (Code.NOT_FOUND, True, False),
        (Code.OCC_MISMATCH, False, True),
    ],
)
def test_issue_codes_are_retryable_for_reads_only(code: Code, read: bool, retryable: bool) -> None:
    assert LedgerError(code, read=read).envelope.error.retryable is retryable


def test_patch_failed_is_rebase_but_not_retryable() -> None:
    body = LedgerError(Code.PATCH_FAILED).envelope.error
    assert (body.retryable, body.recovery) == (False, "read_and_rebase")


def test_occ_mismatch_carries_hashes_and_conflict() -> None:
    err = LedgerError(
        Code.OCC_MISMATCH,
        expected_hash="blake3:" + "0" * 64,
        current_hash=None,
        conflict={"source": "external"},
    )
    body = json.loads(err.envelope.to_json())["error"]
    assert body["expected_hash"] == "blake3:" + "0" * 64
    assert body["current_hash"] is None
    assert body["conflict"] == {"source": "external"}


def test_other_codes_ignore_occ_fields() -> None:
    err = LedgerError(Code.NOT_FOUND, expected_hash="x", current_hash="y", conflict={})
    assert "expected_hash" not in json.loads(err.envelope.to_json())["error"]


def test_envelope_round_trips_through_msgspec() -> None:
    err = LedgerError(Code.VALIDATION, "bad", details={"field": "path"})
    decoded = msgspec.json.decode(err.envelope.to_json())
    assert decoded == err.envelope.to_builtins()
    assert str(err).startswith("VALIDATION")
