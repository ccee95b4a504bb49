"""The error envelope against the contract: every code, its keys, retryable and recovery."""

from __future__ import annotations

import json
import re
from pathlib import Path

import msgspec
import pytest

from ledgerfs.engine import RULES, Code, LedgerError

SPEC = Path(__file__).resolve().parents[3] / "shared" / "spec" / "error-envelope.md"
KEYS = {"code", "message", "path", "details", "suggestion", "retryable", "recovery"}
OCC_KEYS = KEYS | {"expected_hash", "current_hash", "conflict"}


def spec_text() -> str:
    assert SPEC.exists(), f"the contract is expected at {SPEC}"
    return SPEC.read_text(encoding="utf-8")


def spec_codes() -> list[str]:
    section = spec_text().split("\nCodes\n", 1)[1]
    return re.findall(r"^`([A-Z_]+)`\t", section, flags=re.MULTILINE)


def spec_recovery() -> dict[str, str]:
    """Code -> recovery, from the spec's recovery table ("the rest" is fix_arguments)."""
    text = spec_text()
    table = text.split("recovery values used by the filesystem mapper:", 1)[1].strip()
    table = table.split("\n\n")[0]
    result: dict[str, str] = {}
    for line in table.splitlines():
        match = re.match(r"^`(\w+)`\t(.*)$", line)
        if match:
            for code in re.findall(r"`([A-Z_]+)`", match.group(2)):
                result[code] = match.group(1)
    return result


def spec_retryable() -> set[str]:
    text = spec_text()
    table = text.split("Filesystem codes set retryable true only for:", 1)[1].split("Every other")[
        0
    ]
    return set(re.findall(r"^`([A-Z_]+)`\t", table, flags=re.MULTILINE))


def test_the_code_table_has_exactly_the_spec_codes() -> None:
    codes = spec_codes()
    assert len(codes) == 36
    assert [c.value for c in Code] == codes
    assert set(RULES) == set(Code)


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


@pytest.mark.parametrize("code", list(Code), ids=str)
def test_retryable_and_recovery_follow_the_spec(code: Code) -> None:
    body = LedgerError(code).envelope.error
    recovery = spec_recovery().get(code.value, "fix_arguments")
    assert body.recovery == recovery
    assert body.retryable is (code.value in spec_retryable())


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


def test_docs_reference_lists_every_code() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "envelope.md").read_text()
    for code in Code:
        assert f"`{code.value}`" in docs, code
