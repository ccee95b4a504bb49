"""A real `ledgerfs ui` process, real `ledgerfs serve` clients that fill its journal,
and Debian's headless chromium driven by selenium to look at the page."""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import Client

from tests.server._support import REPO, ok, server_env, stdio_params

#: Where the tests save the page's screenshots when LEDGERFS_SCREENSHOTS=1.
SHOTS = REPO / "docs" / "ui"
#: Generous: a browser on a loaded machine; a page that never comes fails the test.
WAIT = 30


class UiProcess:
    """`python -m ledgerfs ui ROOT ...` and the address (with its token) it printed."""

    def __init__(self, root: Path, *flags: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ledgerfs", "ui", str(root), "--port", "0", *flags],
            env=server_env(),
            cwd=str(REPO),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        lines: queue.Queue[str] = queue.Queue()
        assert self.proc.stdout is not None
        stdout = self.proc.stdout
        threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
        try:
            line = lines.get(timeout=WAIT)
        except queue.Empty:
            self.stop()
            raise RuntimeError("ledgerfs ui printed no address") from None
        if " at http://" not in line:
            self.stop()
            raise RuntimeError(f"ledgerfs ui did not start: {line!r}")
        self.url = line.rsplit(" at ", 1)[1].strip()
        self.base = self.url.split("/?", 1)[0]
        self.token = self.url.rsplit("token=", 1)[1]
        self.port = int(self.base.rsplit(":", 1)[1])

    def stop(self) -> str:
        """Stop it; its stderr (where a traceback would be)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        assert self.proc.stderr is not None and self.proc.stdout is not None
        err = self.proc.stderr.read()
        self.proc.stderr.close()
        self.proc.stdout.close()
        return err


@contextmanager
def ui_process(root: Path, *flags: str) -> Iterator[UiProcess]:
    ui = UiProcess(root, *flags)
    try:
        yield ui
    finally:
        err = ui.stop()
    assert "Traceback" not in err, err


class Agent:
    """One MCP client of a real `ledgerfs serve ROOT` over stdio: one session."""

    def __init__(self, portal: BlockingPortal, root: Path, name: str) -> None:
        info = types.Implementation(name=name, version="1.0")
        self._portal = portal
        self._cm: AbstractContextManager[Client] = portal.wrap_async_context_manager(
            Client(stdio_params(root), client_info=info)
        )
        self.client = self._cm.__enter__()
        self.session = ""

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        result = ok(self._portal.call(self.client.call_tool, tool, arguments))
        self.session = result.get("session", self.session)
        return result

    def close(self) -> None:
        self._cm.__exit__(None, None, None)


@contextmanager
def agents(root: Path, *names: str) -> Iterator[list[Agent]]:
    """A stdio server per name, each a client session, driven from this thread."""
    with start_blocking_portal("asyncio") as portal:
        started: list[Agent] = []
        try:
            for name in names:
                started.append(Agent(portal, root, name))
            yield started
        finally:
            for agent in reversed(started):
                agent.close()


def browser_paths() -> tuple[str, str]:
    """Debian's chromium and its driver; without them the test skips, or fails under CI."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if binary and driver:
        return binary, driver
    reason = "the browser tests need Debian's chromium and chromium-driver (apt-get install)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}: .ci/run installs them, and they are missing")
    pytest.skip(reason)


def screenshot(driver: Any, name: str) -> None:
    """Save the page as docs/ui/NAME.png when LEDGERFS_SCREENSHOTS=1 (the docs' pictures)."""
    if os.environ.get("LEDGERFS_SCREENSHOTS") != "1":
        return
    SHOTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1400, min(max(int(height) + 120, 700), 2400))
    driver.save_screenshot(str(SHOTS / f"{name}.png"))
    driver.set_window_size(1400, 900)
