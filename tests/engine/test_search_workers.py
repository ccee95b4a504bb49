"""Content searches shared with a worker process: the same hits, whatever happens to it.

The worker reads and matches the files a search opened (engine/searchworker.py);
the engine lends it (engine/searchers.py). Whichever batches it takes, in
whatever order they come back, and whether it dies before, during or after a
search, a search gives the result pinned in search_cases.json, and leaves no
descriptor and no process behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from ledgerfs.engine import Engine
from ledgerfs.engine import search as search_module
from ledgerfs.engine.paths import Workspace
from ledgerfs.engine.searchers import SearchWorkers, Worker
from ledgerfs.engine.searchworker import BOOT

from .search_cases import CASES, build, run

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")

EXPECTED: dict[str, Any] = json.loads((Path(__file__).parent / "search_cases.json").read_text())
CONTENT_CASES = [(name, arguments) for name, arguments in CASES if "content" in arguments]


def descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def warm(root: Path) -> None:
    """Resolve once: the resolver keeps a descriptor of /proc/self/fd from then on."""
    Workspace([str(root)]).resolve(str(root))


def ready(workers: SearchWorkers) -> Worker:
    """A worker of `workers` that has said it reads jobs, given back idle."""
    worker = workers.take()
    assert worker is not None
    deadline = time.monotonic() + 30
    while not worker.ready:
        assert time.monotonic() < deadline, "the worker never started"
        assert worker.replies(0.05) == []
    workers.give_back(worker, reusable=True)
    return worker


class Sent:
    """Counts the batches handed to a worker, and may act after each."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, after: Any = None) -> None:
        self.batches = 0
        send = Worker.send

        def counted(worker: Worker, job: Any, fds: Any) -> None:
            send(worker, job, fds)
            self.batches += 1
            if after is not None:
                after(worker, self.batches)

        monkeypatch.setattr(Worker, "send", counted)


@pytest.fixture
def workers() -> Iterator[SearchWorkers]:
    pool = SearchWorkers(limit=1)
    yield pool
    pool.close()


@pytest.mark.parametrize("batch_files", [1, 3, 64])
@pytest.mark.parametrize(("name", "arguments"), CONTENT_CASES, ids=[n for n, _ in CONTENT_CASES])
def test_a_search_shared_with_a_worker_gives_the_pinned_result(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    workers: SearchWorkers,
    name: str,
    arguments: dict[str, Any],
    batch_files: int,
) -> None:
    # Batches of one file and two in flight: the worker and this thread take
    # turns, and replies come back while later batches are searched here.
    monkeypatch.setattr(search_module, "BATCH_FILES", batch_files)
    root = build(tmp_path)
    ready(workers)
    sent = Sent(monkeypatch)
    warm(root)
    before = descriptors()
    assert run(root, arguments, workers) == EXPECTED[name]
    assert sent.batches > 0
    assert descriptors() == before  # the idle worker's own descriptors were there before


@pytest.mark.parametrize("when", ["before", "during"])
def test_a_worker_that_dies_changes_no_result_and_is_not_lent_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: SearchWorkers, when: str
) -> None:
    monkeypatch.setattr(search_module, "BATCH_FILES", 1)
    root = build(tmp_path)
    worker = ready(workers)

    def kill(sent_to: Worker, batches: int) -> None:
        if batches == 1:
            sent_to.process.kill()
            sent_to.process.wait()

    if when == "before":
        worker.process.kill()
        worker.process.wait()
    else:
        Sent(monkeypatch, after=kill)
    warm(root)
    before = descriptors()
    for name, arguments in CONTENT_CASES:
        assert run(root, arguments, workers) == EXPECTED[name], name
    # The dead worker was stopped (its descriptors closed), a new one started.
    assert worker.process.returncode is not None
    assert worker not in workers._idle
    assert descriptors() <= before


def test_a_search_that_fails_with_work_in_flight_stops_its_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: SearchWorkers
) -> None:
    monkeypatch.setattr(search_module, "BATCH_FILES", 1)
    root = build(tmp_path)
    worker = ready(workers)
    opened = search_module.Walk.open
    calls = 0

    def failing(walk: Any, entry: Any, max_size: int) -> tuple[int, int]:
        nonlocal calls
        calls += 1
        if calls == 6:
            raise RuntimeError("stop here")
        return opened(walk, entry, max_size)

    monkeypatch.setattr(search_module.Walk, "open", failing)
    warm(root)
    before = descriptors()
    with pytest.raises(RuntimeError, match="stop here"):
        run(root, {"content": "alpha"}, workers)
    # Its replies may never be read: it is not lent again, and nothing is left open.
    assert worker.process.wait(10) is not None
    assert workers._idle == []
    assert descriptors() < before


def test_no_worker_is_lent_past_the_limit_or_after_close() -> None:
    workers = SearchWorkers(limit=1)
    first = workers.take()
    assert first is not None
    assert workers.take() is None  # the second search at once searches alone
    workers.give_back(first, reusable=True)
    assert workers.take() is first
    workers.give_back(first, reusable=True)
    workers.close()
    assert first.process.wait(10) is not None
    assert workers.take() is None
    assert SearchWorkers(limit=0).take() is None


def test_the_worker_imports_nothing_of_the_engine_or_the_journal() -> None:
    # What the worker runs, up to its loop: the modules it has then.
    setup = BOOT.split("from ledgerfs.engine.searchworker import serve")[0]
    probe = setup + (
        "import json, ledgerfs.engine.searchworker\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('ledgerfs'))))\n"
    )
    folder = os.path.dirname(search_module.__file__)
    done = subprocess.run(
        [sys.executable, "-I", "-c", probe, folder, "0"],
        capture_output=True,
        check=True,
        text=True,
    )
    assert json.loads(done.stdout) == [
        "ledgerfs",
        "ledgerfs.engine",
        "ledgerfs.engine.credentials",
        "ledgerfs.engine.searchworker",
        "ledgerfs.engine.textbytes",
    ]


def test_the_engine_stops_its_workers_when_it_closes(tmp_path: Path) -> None:
    root = build(tmp_path)

    async def main() -> list[Worker]:
        config = {"roots": [str(root)], "journal": str(tmp_path / "j.db")}
        async with Engine.open(config) as engine:
            engine.searchers.limit = 1
            session = await engine.session()
            for _ in range(50):  # until the worker is up and idle
                await session.call("search_files", {"path": ".", "content": "alpha"})
                if engine.searchers._idle and engine.searchers._idle[0].ready:
                    break
                await anyio.sleep(0.05)
            return list(engine.searchers._idle)

    lent = anyio.run(main)
    assert lent
    for worker in lent:
        assert worker.process.poll() is not None


def test_a_worker_ignores_ctrl_c_and_ends_with_its_engine(workers: SearchWorkers) -> None:
    worker = ready(workers)
    worker.process.send_signal(signal.SIGINT)
    time.sleep(0.2)
    assert worker.process.poll() is None  # the engine decides when it ends
    workers.close()
    assert worker.process.wait(10) == 0


def test_running_out_of_descriptors_fails_a_search_rather_than_passing_files_over(
    tmp_path: Path,
) -> None:
    # A process at its limit of open files: the search is an error naming EMFILE,
    # not a result that silently left out the files it could not open.
    root = build(tmp_path)
    probe = f"""
import os, resource, sys
from ledgerfs.engine.paths import Workspace
from ledgerfs.engine.requests import SearchFiles
from ledgerfs.engine.search import search_files
workspace = Workspace([{str(root)!r}])
folder = workspace.resolve(".")
open_now = len(os.listdir("/proc/self/fd"))
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (open_now + 2, hard))
try:
    search_files(workspace, folder, SearchFiles(path=".", content="alpha"), 1 << 20)
except OSError as exc:
    print(exc.errno == __import__("errno").EMFILE)
else:
    print("no error")
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "True", done.stderr
