"""The page in a real browser (Debian's headless chromium, through selenium), over a
journal that real tool calls made through `ledgerfs serve` on stdio.

Each test reads what a person would see: the listings, a diff's text, the preview
of an undo or a rewind and what its confirmation does to the files on disk, and a
tool call appearing while the page stays open. With LEDGERFS_SCREENSHOTS=1 they save
the pictures docs/ui.md shows.
"""

from __future__ import annotations

import base64
import struct
import zlib
from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as seen
from selenium.webdriver.support.ui import WebDriverWait

from ._support import WAIT, agents, screenshot, ui_process

HELLO = "def hello():\n    return 'hi'\n\n\nprint(hello())\n"


def png(red: int, green: int, blue: int) -> bytes:
    """A 48x32 picture of one colour."""
    rows = b"".join(b"\x00" + bytes([red, green, blue]) * 48 for _ in range(32))

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    header = struct.pack(">IIBBBBB", 48, 32, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))


def text_of(driver: Any, css: str = "main") -> str:
    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def wait_for_text(driver: Any, text: str, css: str = "main") -> None:
    WebDriverWait(driver, WAIT).until(
        seen.text_to_be_present_in_element((By.CSS_SELECTOR, css), text)
    )


def click(driver: Any, css: str) -> None:
    WebDriverWait(driver, WAIT).until(seen.element_to_be_clickable((By.CSS_SELECTOR, css))).click()


def test_the_page_lists_sessions_and_shows_a_transactions_diff(
    workspace: Path, browser: Any
) -> None:
    with agents(workspace, "claude-code", "cursor") as (alpha, beta):
        alpha.call("write_file", path="hello.py", content=HELLO)
        alpha.call("checkpoint", label="turn 1")
        edit = alpha.call(
            "edit_file", path="hello.py", edits=[{"old_text": "'hi'", "new_text": "'hello, world'"}]
        )
        beta.call("write_file", path="notes.md", content="# Notes\n\n- one\n- two\n")
        encoded = base64.b64encode(png(200, 40, 40)).decode()
        beta.call("write_file", path="logo.png", content=encoded, encoding="base64")
        repainted = beta.call(
            "write_file",
            path="logo.png",
            content=base64.b64encode(png(40, 90, 200)).decode(),
            encoding="base64",
        )
        with ui_process(workspace) as ui:
            browser.get(ui.base + "/")
            assert "refused: no token" in text_of(browser, "body")
            browser.get(ui.url)
            wait_for_text(browser, "Sessions")
            listed = text_of(browser, "table.sessions")
            assert "claude-code" in listed and "cursor" in listed
            assert alpha.session in listed and beta.session in listed
            screenshot(browser, "sessions")

            click(browser, f'tr[data-session="{alpha.session}"] a')
            wait_for_text(browser, "Checkpoints")
            assert "turn 1" in text_of(browser, "table.checkpoints")
            screenshot(browser, "session")

            click(browser, f'tr[data-tx="{edit["transaction"]}"] td a')
            wait_for_text(browser, f"Transaction {edit['transaction']}")
            assert "claude-code 1.0" in text_of(browser, ".facts")
            diff = text_of(browser, "table.diff")
            assert "-    return 'hi'" in diff.replace("\n", "")
            assert "+    return 'hello, world'" in diff.replace("\n", "")
            screenshot(browser, "transaction")

            click(browser, "#view-split")
            wait_for_text(browser, "side by side", ".views")
            split = text_of(browser, "table.split")
            assert "return 'hi'" in split and "return 'hello, world'" in split
            screenshot(browser, "transaction-split")

            browser.get(f"{ui.base}/tx/{repainted['transaction']}")
            wait_for_text(browser, "logo.png")
            thumbs = browser.find_elements(By.CSS_SELECTOR, "img.thumb")
            assert len(thumbs) == 2
            # Both pictures loaded (a refused or broken one has no natural width).
            assert all(
                browser.execute_script("return arguments[0].naturalWidth", t) == 48 for t in thumbs
            )
            assert "Size" in text_of(browser, "table.binary")
            screenshot(browser, "transaction-binary")

            click(browser, "section.file h3 a")
            wait_for_text(browser, "History of")
            assert len(browser.find_elements(By.CSS_SELECTOR, "tr.tx-row")) == 2
            screenshot(browser, "file")

            box = browser.find_element(By.CSS_SELECTOR, "header input[name=q]")
            box.send_keys("hello\n")
            wait_for_text(browser, "hello.py", "table.found")
            screenshot(browser, "search")


def test_undo_from_the_page_changes_the_file_and_shows_the_new_transaction(
    workspace: Path, browser: Any
) -> None:
    with agents(workspace, "claude-code") as (agent,):
        agent.call("write_file", path="a.txt", content="one\n")
        edit = agent.call("write_file", path="a.txt", content="two\n")
        with ui_process(workspace) as ui:
            browser.get(f"{ui.url}")
            browser.get(f"{ui.base}/tx/{edit['transaction']}")
            click(browser, "#undo")
            wait_for_text(browser, "What would change")
            preview = text_of(browser, "table.diff").replace("\n", "")
            assert "-two" in preview and "+one" in preview
            assert (workspace / "a.txt").read_text() == "two\n"  # a preview changes nothing
            screenshot(browser, "undo-preview")

            click(browser, "#confirm")
            wait_for_text(browser, f"undoes {edit['transaction']}")
            assert (workspace / "a.txt").read_text() == "one\n"
            undo_tx = int(browser.current_url.rsplit("/", 1)[1])
            assert undo_tx > edit["transaction"]
            assert "undo" in text_of(browser, ".facts")
            # The undone transaction says so, and offers no second undo.
            browser.get(f"{ui.base}/tx/{edit['transaction']}")
            wait_for_text(browser, f"undone by {undo_tx}")
            assert not browser.find_elements(By.CSS_SELECTOR, "#undo")


def test_a_rewind_preview_shows_a_second_sessions_conflict_and_confirming_keeps_its_work(
    workspace: Path, browser: Any
) -> None:
    lines = "".join(f"line {i}\n" for i in range(1, 9))
    with agents(workspace, "claude-code", "cursor") as (alpha, beta):
        alpha.call("write_file", path="shared.txt", content=lines)
        alpha.call("write_file", path="own.txt", content="alpha's\n")
        alpha.call(
            "edit_file", path="shared.txt", edits=[{"old_text": "line 4\n", "new_text": "ALPHA\n"}]
        )
        beta.call(
            "edit_file", path="shared.txt", edits=[{"old_text": "ALPHA\n", "new_text": "BETA\n"}]
        )
        with ui_process(workspace) as ui:
            browser.get(ui.url)
            browser.get(f"{ui.base}/session?id={alpha.session}")
            click(browser, "#rewind-session")
            wait_for_text(browser, "conflict")
            conflicts = text_of(browser, "section.conflicts")
            assert "shared.txt" in conflicts and beta.session in conflicts
            assert "BETA" in conflicts
            # The rest would go: alpha's own file is deleted again.
            assert "own.txt" in text_of(browser, "table.diff")
            screenshot(browser, "rewind-preview")
            before = (workspace / "shared.txt").read_text()

            click(browser, "#confirm")
            wait_for_text(browser, "rewind session")
            # The conflicting file keeps beta's work; the rest of alpha's is gone.
            assert (workspace / "shared.txt").read_text() == before
            assert "BETA" in before
            assert not (workspace / "own.txt").exists()


def test_a_tool_call_appears_without_a_reload(workspace: Path, browser: Any) -> None:
    with agents(workspace, "claude-code") as (agent,):
        agent.call("write_file", path="first.txt", content="1\n")
        with ui_process(workspace) as ui:
            browser.get(ui.url)
            browser.get(f"{ui.base}/transactions")
            wait_for_text(browser, "first.txt")
            # A reload would drop this mark.
            browser.execute_script("window.stillTheSamePage = true")
            made = agent.call("write_file", path="second.txt", content="2\n")
            WebDriverWait(browser, WAIT).until(
                lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-tx="{made["transaction"]}"]')
            )
            assert browser.execute_script("return window.stillTheSamePage") is True
            assert "second.txt" in text_of(browser, "table.tx-list")
            screenshot(browser, "transactions")


def test_changes_outside_ledgerfs_are_listed(workspace: Path, browser: Any) -> None:
    with agents(workspace, "claude-code") as (agent,):
        made = agent.call("write_file", path="kept.txt", content="as written\n")
        agent.call("write_file", path="edited.txt", content="as written\n")
    (workspace / "edited.txt").write_text("changed in an editor\n")
    with ui_process(workspace) as ui:
        browser.get(ui.url)
        browser.get(f"{ui.base}/outside")
        wait_for_text(browser, "changed outside ledgerfs")
        rows = text_of(browser, "table.drifted")
        assert "edited.txt" in rows and "kept.txt" not in rows
        assert str(made["transaction"] + 1) in rows
        screenshot(browser, "outside")


def test_a_readonly_page_shows_no_buttons(workspace: Path, browser: Any) -> None:
    with agents(workspace, "claude-code") as (agent,):
        made = agent.call("write_file", path="a.txt", content="one\n")
        agent.call("checkpoint", label="start")
    with ui_process(workspace, "--readonly") as ui:
        browser.get(ui.url)
        wait_for_text(browser, "read-only", "header")
        browser.get(f"{ui.base}/tx/{made['transaction']}")
        wait_for_text(browser, "a.txt")
        assert not browser.find_elements(By.CSS_SELECTOR, "#undo")
        screenshot(browser, "readonly")
        browser.get(f"{ui.base}/session?id={made['session']}")
        wait_for_text(browser, "start")
        assert not browser.find_elements(By.CSS_SELECTOR, "#rewind-session, .checkpoints .button")


def test_rewind_to_a_checkpoint_takes_back_what_came_after(workspace: Path, browser: Any) -> None:
    with agents(workspace, "claude-code") as (agent,):
        agent.call("write_file", path="plan.md", content="step 1\n")
        point = agent.call("checkpoint", label="before the risky step")
        agent.call("write_file", path="plan.md", content="step 2\n")
        agent.call("write_file", path="extra.txt", content="made after\n")
        with ui_process(workspace) as ui:
            browser.get(ui.url)
            browser.get(f"{ui.base}/session?id={agent.session}")
            click(browser, f'tr[data-checkpoint="{point["checkpoint"]}"] a.button')
            wait_for_text(browser, "What would change: 2 files")
            assert "rewind to checkpoint" in text_of(browser, "h1").lower()
            assert not browser.find_elements(By.CSS_SELECTOR, "section.conflicts")
            assert (workspace / "plan.md").read_text() == "step 2\n"
            click(browser, "#confirm")
            wait_for_text(browser, "rewind to checkpoint")
            assert (workspace / "plan.md").read_text() == "step 1\n"
            assert not (workspace / "extra.txt").exists()
