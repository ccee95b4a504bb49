"""Who may talk to `ledgerfs ui`: this user's browser on this machine, with the token.

Every refusal is checked against a real `ledgerfs ui` process (and the file a refused
change names is checked on disk); the peer address, which a test cannot fake over a
socket, against the same `Guard` through an in-process transport.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from ledgerfs.engine.ui import Guard

from ._support import UiProcess, agents, ui_process


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[UiProcess, Path, int]]:
    root = (tmp_path_factory.mktemp("guard") / "ws").resolve()
    root.mkdir()
    with agents(root, "claude-code") as (agent,):
        agent.call("write_file", path="a.txt", content="one\n")
        made = agent.call("write_file", path="a.txt", content="two\n")
    with ui_process(root) as ui:
        yield ui, root, made["transaction"]


def _headers(ui: UiProcess, **given: str) -> dict[str, str]:
    host = f"127.0.0.1:{ui.port}"
    values = {
        "host": host,
        "origin": f"http://{host}",
        "cookie": f"ledgerfs_ui_{ui.port}={ui.token}",
    }
    values.update({k.replace("_", "-"): v for k, v in given.items()})
    return {k: v for k, v in values.items() if v != "-"}


#: (what, headers: "-" leaves one out, the reason the page gives)
REFUSED_READS = [
    ("no token", {"cookie": "-"}, "no token"),
    ("a wrong token", {"cookie": "ledgerfs_ui_0=x"}, "no token"),
    ("a rebound name", {"host": "evil.example"}, "Host header"),
    ("a rebound name with the port", {"host": "evil.example:{port}"}, "Host header"),
    ("another port", {"host": "127.0.0.1:1"}, "Host header"),
    ("another origin", {"origin": "http://evil.example"}, "another origin"),
    ("a page of another port", {"origin": "http://127.0.0.1:1"}, "another origin"),
    ("the null origin", {"origin": "null"}, "another origin"),
    ("a cross-site fetch", {"sec_fetch_site": "cross-site"}, "another site"),
]


@pytest.mark.parametrize(
    ("what", "given", "reason"), REFUSED_READS, ids=[r[0] for r in REFUSED_READS]
)
def test_a_read_is_refused(
    served: tuple[UiProcess, Path, int], what: str, given: dict[str, str], reason: str
) -> None:
    ui, _, tx = served
    given = {k: v.format(port=ui.port) for k, v in given.items()}
    for path in ("/", f"/tx/{tx}", "/latest", "/static/ui.css"):
        response = httpx.get(ui.base + path, headers=_headers(ui, **given))
        assert response.status_code == 403, (what, path)
        assert reason in response.text
        assert "a.txt" not in response.text


def test_the_token_becomes_a_cookie_and_leaves_the_address(
    served: tuple[UiProcess, Path, int],
) -> None:
    ui, _, _ = served
    first = httpx.get(ui.url, headers=_headers(ui, cookie="-"))
    assert first.status_code == 303
    assert first.headers["location"] == "/"
    cookie = first.headers["set-cookie"].lower()
    assert f"ledgerfs_ui_{ui.port}={ui.token.lower()}" in cookie
    assert "httponly" in cookie and "samesite=strict" in cookie
    page = httpx.get(ui.base + "/", headers=_headers(ui))
    assert page.status_code == 200
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy
    assert page.headers["x-content-type-options"] == "nosniff"


#: (what, headers, form, status, reason)
REFUSED_CHANGES = [
    ("no Origin", {"origin": "-"}, True, 403, "without its Origin"),
    ("another origin", {"origin": "http://evil.example"}, True, 403, "another origin"),
    ("no token in the form", {}, False, 403, "lacks the token"),
    ("no cookie", {"cookie": "-"}, True, 403, "no token"),
    ("a rebound name", {"host": "evil.example:{port}"}, True, 403, "Host header"),
]


@pytest.mark.parametrize(
    ("what", "given", "with_token", "status", "reason"),
    REFUSED_CHANGES,
    ids=[r[0] for r in REFUSED_CHANGES],
)
def test_a_change_is_refused_and_changes_nothing(
    served: tuple[UiProcess, Path, int],
    what: str,
    given: dict[str, str],
    with_token: bool,
    status: int,
    reason: str,
) -> None:
    ui, root, tx = served
    given = {k: v.format(port=ui.port) for k, v in given.items()}
    form = {"token": ui.token} if with_token else {}
    for path, fields in ((f"/undo/{tx}", form), ("/rewind", {**form, "session": "x"})):
        response = httpx.post(ui.base + path, headers=_headers(ui, **given), data=fields)
        assert response.status_code == status, (what, path, response.text)
        assert reason in response.text
    assert (root / "a.txt").read_text() == "two\n"


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH"])
def test_other_methods_are_refused(served: tuple[UiProcess, Path, int], method: str) -> None:
    ui, root, tx = served
    response = httpx.request(method, f"{ui.base}/undo/{tx}", headers=_headers(ui))
    assert response.status_code == 405
    assert (root / "a.txt").read_text() == "two\n"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("peer", "status"),
    [("127.0.0.1", 200), ("127.0.0.2", 200), ("::1", 200), ("10.0.0.5", 403), ("192.168.1.9", 403)],
)
async def test_only_loopback_peers_are_answered(peer: str, status: int) -> None:
    app = Starlette(routes=[Route("/", lambda request: PlainTextResponse("page"))])
    guarded = Guard(app, token="t", port=8000)
    transport = httpx.ASGITransport(app=guarded, client=(peer, 4000))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as client:
        response = await client.get("/", headers={"cookie": "ledgerfs_ui_8000=t"})
    assert response.status_code == status
    assert (response.text == "page") is (status == 200)


def test_a_readonly_page_refuses_a_change_sent_anyway(tmp_path: Path) -> None:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    with agents(root, "claude-code") as (agent,):
        agent.call("write_file", path="a.txt", content="one\n")
        made = agent.call("write_file", path="a.txt", content="two\n")
    with ui_process(root, "--readonly") as ui:
        for path, fields in (
            (f"/undo/{made['transaction']}", {}),
            ("/rewind", {"session": made["session"]}),
        ):
            response = httpx.post(
                ui.base + path, headers=_headers(ui), data={"token": ui.token, **fields}
            )
            assert response.status_code == 403
            assert "READONLY" in response.text
        # Not even a preview: a read-only engine refuses the dry run too.
        preview = httpx.get(f"{ui.base}/undo/{made['transaction']}", headers=_headers(ui))
        assert preview.status_code == 403 and "READONLY" in preview.text
        assert 'id="confirm"' not in preview.text
    assert (root / "a.txt").read_text() == "two\n"
