"""The search worker processes an engine keeps: started on demand, lent, stopped.

A content search borrows a worker (`SearchWorkers.take`) for its length and
gives it back; an engine keeps at most one worker per core beyond the first,
so a second search at the same time, or a machine with one core, searches in
its own thread alone. A worker that died, hangs up, or was left with work in
flight (a cancelled or failed search) is stopped, never lent again; the next
search starts another. Workers end with the engine (`close`), and on their
own when the engine's process dies: their stdin is its pipe.

`searchworker` is the other side: what a worker runs and the frames it speaks.
"""

from __future__ import annotations

import errno
import logging
import multiprocessing.spawn
import os
import select
import socket
import subprocess
import threading
from collections.abc import Sequence

import msgspec

from . import searchworker
from .searchworker import BOOT, Done, Job, Ready, frame

__all__ = ["SearchWorkers", "Worker", "WorkerGone"]

log = logging.getLogger(__name__)

_decode_reply = msgspec.msgpack.Decoder(Ready | Done).decode
_LENGTH = 4


class WorkerGone(Exception):
    """The worker exited, hung up, or cannot take a job: its jobs are the caller's."""


class Worker:
    """One worker process: jobs out, replies in, never blocking the caller for long."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        folder = os.path.dirname(os.path.abspath(searchworker.__file__))
        try:
            self.process = subprocess.Popen(
                [_interpreter(), "-I", "-c", BOOT, folder, str(theirs.fileno())],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                pass_fds=(theirs.fileno(),),
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._channel = ours
        self._channel.setblocking(False)
        assert self.process.stdin is not None and self.process.stdout is not None
        self._jobs = self.process.stdin.fileno()
        self._replies = self.process.stdout.fileno()
        os.set_blocking(self._jobs, False)
        os.set_blocking(self._replies, False)
        # poll, not select: a busy server's descriptors may number past FD_SETSIZE.
        self._waiting = select.poll()
        self._waiting.register(self._replies, select.POLLIN)
        self._buffer = bytearray()
        #: Whether the worker said it is reading jobs.
        self.ready = False

    def send(self, job: Job, fds: Sequence[int]) -> None:
        """Hand the worker `job` and its descriptors (theirs now too: the caller
        keeps and closes its own). Raises WorkerGone if it cannot take it."""
        try:
            socket.send_fds(self._channel, [b"."], list(fds))
        except OSError as exc:
            raise WorkerGone(f"the worker takes no descriptors: {exc}") from exc
        try:
            data = frame(job)
            written = os.write(self._jobs, data)
        except OSError as exc:
            raise WorkerGone(f"the worker takes no jobs: {exc}") from exc
        if written != len(data):
            # A job frame is small and a search keeps a few in flight: a full
            # pipe means the worker stopped reading.
            raise WorkerGone("the worker stopped reading its jobs")

    def replies(self, timeout: float) -> list[Done]:
        """The jobs done since the last call, waiting up to `timeout` seconds for
        one. Raises WorkerGone when the worker's output ends."""
        if not self._waiting.poll(timeout * 1000):
            return []
        try:
            chunk = os.read(self._replies, 1 << 20)
        except BlockingIOError:
            return []
        except OSError as exc:
            raise WorkerGone(f"the worker's replies fail: {exc}") from exc
        if not chunk:
            raise WorkerGone(f"the worker exited ({self.process.poll()})")
        self._buffer += chunk
        done: list[Done] = []
        for reply in self._frames():
            if isinstance(reply, Ready):
                self.ready = True
            else:
                done.append(reply)
        return done

    def _frames(self) -> list[Ready | Done]:
        found = []
        while len(self._buffer) >= _LENGTH:
            size = int.from_bytes(self._buffer[:_LENGTH], "little")
            if len(self._buffer) < _LENGTH + size:
                break
            body = bytes(self._buffer[_LENGTH : _LENGTH + size])
            del self._buffer[: _LENGTH + size]
            try:
                found.append(_decode_reply(body))
            except msgspec.DecodeError as exc:
                raise WorkerGone(f"the worker's reply is not one: {exc}") from exc
        return found

    def stop(self, *, wait: float = 1.0) -> None:
        """End the worker: its stdin closed (it exits), killed if it lingers."""
        self._channel.close()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError as exc:
                    if exc.errno != errno.EPIPE:
                        raise
        try:
            self.process.wait(wait)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _interpreter() -> str:
    """The Python that runs a worker: the one `multiprocessing` starts, which an
    embedder whose `sys.executable` is not Python sets (`multiprocessing.set_executable`)."""
    return os.fsdecode(multiprocessing.spawn.get_executable())


def _default_limit() -> int:
    # One core for the searching thread, the others for workers (at most 4:
    # more searches at once than that share the machine anyway).
    return max(0, min(4, (os.cpu_count() or 1) - 1))


class SearchWorkers:
    """The workers of one engine; thread-safe, as searches run on worker threads."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = _default_limit() if limit is None else limit
        self._idle: list[Worker] = []
        self._lent = 0
        self._closed = False
        self._lock = threading.Lock()

    def take(self) -> Worker | None:
        """A worker for one search (an idle one, or one started now), or None
        when every worker is lent, the engine closed, or none can start."""
        with self._lock:
            if self._closed or not _interpreter():
                return None
            if self._idle:
                self._lent += 1
                return self._idle.pop()
            if self._lent + len(self._idle) >= self.limit:
                return None
            self._lent += 1
        try:
            return Worker()
        except OSError as exc:
            log.warning("a search worker could not start (%s): searching in one thread", exc)
            with self._lock:
                self._lent -= 1
            return None

    def give_back(self, worker: Worker, *, reusable: bool) -> None:
        """Return a lent worker; one that is not `reusable` is stopped."""
        with self._lock:
            self._lent -= 1
            keep = reusable and not self._closed
            if keep:
                self._idle.append(worker)
        if not keep:
            worker.stop(wait=0)

    def close(self) -> None:
        """Stop the idle workers and every worker given back from now on."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.stop()
