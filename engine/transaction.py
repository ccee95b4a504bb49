"""The one place that writes files and journal records: apply, roll back, roll forward.

Protocol (DESIGN.md): the caller has checked every target under its locks; here
the intent with before and after images becomes durable in the journal, each
change is applied atomically, and the transaction is marked committed before the
result is returned. A failure while applying restores the applied changes from
their before images in reverse order, each only while its path still holds what
this transaction put there; the rollback's outcome is the error.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Generic, Literal, TypeVar

import anyio
import msgspec

from ..journal import Journal, JournalError, MutationRecord, TxIntent, TxRecord
from .changes import Change, Entry, is_link_mode, unkept
from .effects import State, effects, match_prefix, position, state_of, under
from .errors import Code, LedgerError, errno_name
from .fileops import NEW_FILE_MODE, FileOps, load_entry
from .incidents import record_incident
from .nonutf8 import reply_json

__all__ = [
    "Applier",
    "Finished",
    "Meanwhile",
    "Pending",
    "Restoration",
    "change_of",
    "folders_of",
    "inverse",
    "journal_error",
]

T = TypeVar("T")

#: Up to this many bytes, file steps without fsync run on the event loop thread.
INLINE_MAX = 64 * 1024


class Restoration(msgspec.Struct, kw_only=True):
    """Which paths a rollback (or roll-forward) brought back, and which not and why."""

    restored: list[str] = msgspec.field(default_factory=list)
    not_restored: list[dict[str, str]] = msgspec.field(default_factory=list)
    acted: int = 0

    def outcome(self) -> Code:
        if not self.not_restored:
            return Code.ROLLBACK_COMPLETE
        if self.acted == 0:
            return Code.ROLLBACK_FAILED
        return Code.ROLLBACK_PARTIAL


def journal_error(exc: JournalError) -> dict[str, Any]:
    """The cause a journal failure contributes to an envelope's details."""
    return {
        "stage": "journal",
        "kind": exc.kind,
        "errno": exc.errno_name,
        "journal": exc.path,
        "message": exc.message,
    }


def _os_cause(exc: OSError, change: Change) -> dict[str, Any]:
    return {
        "stage": "apply",
        "op": change.op,
        "path": change.path,
        "errno": errno_name(exc),
        "message": exc.strerror or str(exc),
    }


class Applier:
    """Applies planned changes as journaled transactions."""

    def __init__(
        self,
        journal: Journal,
        fileops: FileOps,
        *,
        on_started: Callable[[int], None],
        on_finished: Callable[[int], None],
        max_file_size: int | None = None,
    ) -> None:
        self.journal = journal
        self.fileops = fileops
        # Every after and before image is durable in the journal before a file
        # step (durability full), so files go in without an early write-out.
        self.journaled = journal.durability == "full"
        self._on_started = on_started
        self._on_finished = on_finished
        # Rollback and recovery read what paths hold; a file over the size cap
        # (one a delete did not keep) is read as its hash alone, in bounded memory.
        self._disk_state = partial(disk_state, hash_above=max_file_size)
        self._disk_entry = partial(disk_entry, hash_above=max_file_size)
        # Rollbacks done on disk whose journal record failed; retried on later
        # calls and on close, so recovery does not roll a refused change forward.
        self._unrecorded: list[tuple[int, str, str, list[int]]] = []

    async def run_group(
        self,
        group: Sequence[Pending],
        *,
        meanwhile: Meanwhile[Any] | None = None,
        here: bool = False,
    ) -> list[int | Exception]:
        """Journal, apply and commit each transaction of `group`, with one journal
        group for all their intents (one commit, one fsync); a lone transaction is
        a group of one.

        Returns, in order, each transaction's id, or its error: ROLLBACK_COMPLETE,
        ROLLBACK_PARTIAL or ROLLBACK_FAILED when the journal or a file step fails,
        with the cause and what was restored in its details. `meanwhile` runs
        while the intents are made durable (see `Meanwhile`) and has run when this
        returns; what it raised is kept in it for the caller. With `here` (the
        caller has the event loop to itself) the journal group may commit on the
        loop's thread (`Journal.begin_group`).
        """
        if self._unrecorded:
            await self.record_rollbacks()
        # No fsync and little data: a few page-cache writes and a rename cost less
        # than any thread hop, so a small transaction's file step runs on the loop,
        # as its intent's `then`: the steps of a whole group run in the callback
        # that wakes it, and no transaction waits for a wake-up of its own. A big
        # one's step runs in a worker thread once its intent is durable.
        steps = [
            _FileStep(self, p.changes) if _payload(p.changes) <= INLINE_MAX else None for p in group
        ]
        intents = [
            _intent(p.session, p.changes, p.summary, p.budget_charge, p.undo_of) for p in group
        ]
        outcomes: list[int | Exception] = []
        # Once queued, each intent is the commit point: a cancelled caller must not
        # leave it pending for the next open to roll forward, so finish it here.
        with anyio.CancelScope(shield=True):
            begun = await self.journal.begin_group(
                intents, steps, trusted=True, meanwhile=meanwhile, here=here
            )
            for tx, step, pending in zip(begun, steps, group, strict=True):
                if isinstance(tx, BaseException):
                    outcomes.append(_begin_error(tx, pending.changes))
                    continue
                try:
                    if step is None:
                        self._on_started(tx)
                        done, failure = await anyio.to_thread.run_sync(
                            self._apply_all, pending.changes
                        )
                    else:
                        done, failure = step.outcome()
                    if failure is not None:
                        await self._fail(tx, pending.changes, done, failure)
                    self._mark_committed(tx)
                    outcomes.append(tx)
                except Exception as exc:  # the rollback's outcome, or what the step raised
                    outcomes.append(exc)
                finally:
                    self._on_finished(tx)
        return outcomes

    def _mark_committed(self, tx: int) -> None:
        # The durable intent is the commit point: recovery finishes a transaction
        # whose "committed" mark was lost, so the mark need not be awaited. (No
        # contextlib.suppress: an object per call on the hot path.)
        try:  # noqa: SIM105
            self.journal.commit_nowait(tx)
        except JournalError:
            pass

    async def _fail(self, tx: int, changes: Sequence[Change], done: int, exc: OSError) -> None:
        """Roll back after the file step of `changes[done]` failed; raise the outcome."""
        cause = _os_cause(exc, changes[done])
        # A step fails before its effect (its rename or unlink did not happen): it
        # changed nothing, and only the steps before it are restored.
        failed, applied = changes[done], changes[:done]
        incident: str | None = None
        with anyio.CancelScope(shield=True):
            try:
                restoration = await anyio.to_thread.run_sync(self.restore, applied)
            except Exception as broken:  # the rollback itself broke: a defect, logged
                incident = record_incident(broken, "a rollback")
                restoration = Restoration(
                    not_restored=[{"path": c.path, "reason": repr(broken)} for c in applied]
                )
            # It changed nothing: its path holds what it held, whatever that reads as
            # now (a folder swapped under it reads as something else).
            restoration.restored.insert(0, failed.path)
            attempted = [*applied, failed]
            error = _rollback_error(restoration, cause, tx, attempted)
            if incident is not None:
                error.details["incident"] = incident
            unrestored = _unrestored_ordinals(attempted, restoration)
            record = (tx, str(error.code), reply_json(error.envelope), unrestored)
            try:
                await self.journal.rollback(
                    tx, outcome=record[1], cause=record[2], applied=record[3]
                )
            except JournalError as journal_exc:
                error.details["journal_error"] = journal_error(journal_exc)
                self._unrecorded.append(record)
        raise error from exc

    async def record_rollbacks(self) -> None:
        """Retry journal records of rollbacks that could not be written at the time."""
        with anyio.CancelScope(shield=True):
            while self._unrecorded:
                tx, outcome, cause, applied = self._unrecorded[0]
                try:
                    await self.journal.rollback(tx, outcome=outcome, cause=cause, applied=applied)
                except JournalError:
                    return
                self._unrecorded.pop(0)

    def _apply_all(self, changes: Sequence[Change]) -> tuple[int, OSError | None]:
        for index, change in enumerate(changes):
            try:
                self.apply_one(change)
            except OSError as exc:
                return index, exc
        return len(changes), None

    def apply_one(self, change: Change) -> None:
        """Make one planned change on disk (blocking; runs in a worker thread)."""
        ops = self.fileops
        owner = self.journal.owner
        match change.op:
            case "move":
                assert change.destination is not None
                ops.move(change.path, change.destination)
            case "mkdir":
                ops.make_dir(change.path, change.after_mode or 0o755)
            case "rmdir":
                ops.remove_dir(change.path)
            case _ if change.after is None:
                ops.remove(change.path)
            case _ if is_link_mode(change.after_mode):
                ops.install_link(change.path, change.after, owner)
            case _:
                ops.install(
                    change.path,
                    change.after,
                    _mode(change.after_mode),
                    owner,
                    journaled=self.journaled,
                )

    def restore(self, changes: Sequence[Change]) -> Restoration:
        """Undo applied changes in reverse order, each only if its path holds our after image.

        A change whose path a later change moved, and whose later change could
        not be undone, is left as is and reported with that reason.
        """
        result = Restoration()
        stuck: list[str] = []
        for change in reversed(changes):
            named = [e.path for e in effects(change)]
            blocked = next((p for p in stuck for n in named if under(n, p) or under(p, n)), None)
            if blocked is not None:
                reason = f"left as is: a later change at {blocked} could not be undone"
                result.not_restored.append({"path": change.path, "reason": reason})
                stuck.extend(named)
                continue
            if not self._restore_one(change, result):
                stuck.extend(named)
        return result

    def _restore_one(self, change: Change, result: Restoration) -> bool:
        try:
            where = position(change, self._disk_state)
            if where == "before":
                result.restored.append(change.path)
                return True
            if where == "other":
                result.not_restored.append(
                    {"path": change.path, "reason": "changed by someone else since; left as is"}
                )
                return False
            if unkept(change):
                result.not_restored.append({"path": change.path, "reason": NOT_KEPT})
                return False
            self.apply_one(inverse(change))
            result.acted += 1
            result.restored.append(change.path)
            return True
        except OSError as exc:
            result.not_restored.append(
                {"path": change.path, "reason": f"{errno_name(exc)}: {exc.strerror or exc}"}
            )
            return False

    def finish(self, transactions: Sequence[Sequence[Change]]) -> Finished:
        """Complete transactions a dead process left unfinished (recovery).

        `transactions` touch related paths and ran in this order. Their intents
        were durable, so they are rolled forward from the point the disk shows
        (`effects.match_prefix`: a kill leaves a prefix of their changes made, a
        power loss may also leave a made file empty or cut short). When something
        else changed a path since, they are rolled back instead, newest first, as
        far as they can be.
        """
        chain = [change for changes in transactions for change in changes]
        match = match_prefix(chain, self._disk_entry)
        if match is None:
            return Finished(
                action="roll_back",
                restorations=[self.restore(changes) for changes in reversed(transactions)][::-1],
            )
        made, torn = match
        result = Restoration()
        for path, entry in torn.items():
            try:
                self._repair(path, entry)
                result.acted += 1
            except OSError as exc:
                result.not_restored.append(
                    {"path": path, "reason": f"{errno_name(exc)}: {exc.strerror or exc}"}
                )
        for index, change in enumerate(chain):
            try:
                if index >= made:
                    self.apply_one(change)
                    result.acted += 1
                result.restored.append(change.path)
            except OSError as exc:
                result.not_restored.append(
                    {"path": change.path, "reason": f"{errno_name(exc)}: {exc.strerror or exc}"}
                )
        return Finished(action="roll_forward", restorations=[result] * len(transactions))

    def _repair(self, path: str, entry: Entry) -> None:
        assert entry.data is not None
        self.fileops.install(
            path,
            entry.data,
            _mode(entry.mode),
            self.journal.owner,
            journaled=self.journaled,
        )


class Pending(msgspec.Struct, frozen=True):
    """A transaction of a group (`Applier.run_group`): its session, changes,
    summary, budget charge, and the transaction it undoes (if it is an undo)."""

    session: str
    changes: Sequence[Change]
    summary: str
    budget_charge: int
    undo_of: int | None = None


def _begin_error(exc: BaseException, changes: Sequence[Change]) -> Exception:
    """A transaction's error when its begin refused it with `exc`."""
    if isinstance(exc, JournalError):
        error = _rollback_error(Restoration(), journal_error(exc), None, changes)
        error.__cause__ = exc
        return error
    if isinstance(exc, Exception):
        return exc
    raise exc


class Finished(msgspec.Struct, kw_only=True):
    """How recovery completed related transactions: one action, one restoration each."""

    action: Literal["roll_back", "roll_forward"]
    restorations: list[Restoration]


def disk_state(path: str, *, hash_above: int | None = None) -> State:
    """What `path` holds on disk now."""
    return state_of(load_entry(path, links=True, hash_above=hash_above))


def disk_entry(path: str, *, hash_above: int | None = None) -> Entry:
    """What `path` holds on disk now, with its bytes (a link's: its target text),
    or its hash alone when it is over `hash_above` bytes."""
    return load_entry(path, links=True, hash_above=hash_above)


#: Why a change whose before image was not kept (`changes.unkept`) is not restored.
NOT_KEPT = "its content was over max_file_size and not kept; it cannot be restored"


def inverse(change: Change) -> Change:
    """The change that takes a path from this change's after state back to its before."""
    flipped = {"mkdir": "rmdir", "rmdir": "mkdir"}.get(change.op, change.op)
    if change.op == "move":
        assert change.destination is not None and change.destination_label is not None
        return msgspec.structs.replace(
            change,
            path=change.destination,
            label=change.destination_label,
            destination=change.path,
            destination_label=change.label,
        )
    return msgspec.structs.replace(
        change,
        op=flipped,
        before=change.after,
        after=change.before,
        before_hash=change.after_hash,
        after_hash=change.before_hash,
        before_mode=change.after_mode,
        after_mode=change.before_mode,
        regions=None,
    )


class Meanwhile(Generic[T]):
    """Work for a result that needs no disk, done meanwhile: while a group's intents
    are made durable (overlapped with their fsync), `work(*args)`, its result kept.

    The journal runs it and it must not raise there, for the intents are recorded
    whatever it does: its exception is kept too, for the caller to raise once the
    transactions have finished.
    """

    __slots__ = ("args", "error", "result", "work")

    result: T

    def __init__(self, work: Callable[..., T], *args: Any) -> None:
        self.work = work
        self.args = args
        self.error: Exception | None = None

    def __call__(self) -> None:
        try:
            self.result = self.work(*self.args)
        except Exception as exc:
            self.error = exc


class _FileStep:
    """A transaction's file step as its intent's `then` (see `Applier.run_group`): it
    marks the transaction started and applies its changes. What that did, or
    raised, is kept for the transaction's task, which finishes the transaction
    whatever happened (a `then` that raised would make `begin` raise instead)."""

    __slots__ = ("_applier", "_changes", "_error", "_outcome")

    def __init__(self, applier: Applier, changes: Sequence[Change]) -> None:
        self._applier = applier
        self._changes = changes
        self._outcome: tuple[int, OSError | None] | None = None
        self._error: BaseException | None = None

    def __call__(self, tx: int) -> None:
        try:
            self._applier._on_started(tx)
            self._outcome = self._applier._apply_all(self._changes)
        except BaseException as exc:  # raised in the transaction's task instead
            self._error = exc

    def outcome(self) -> tuple[int, OSError | None]:
        """How many changes were applied and the error that stopped the rest."""
        if self._error is not None:
            raise self._error
        assert self._outcome is not None  # the journal ran it before begin returned
        return self._outcome


def _payload(changes: Sequence[Change]) -> int:
    """The bytes the changes write."""
    total = 0
    for change in changes:
        if change.after is not None:
            total += len(change.after)
    return total


def _mode(mode: int | None) -> int:
    return NEW_FILE_MODE if mode is None else mode


def _unrestored_ordinals(changes: Sequence[Change], restoration: Restoration) -> list[int]:
    missing = {item["path"] for item in restoration.not_restored}
    return [i for i, change in enumerate(changes) if change.path in missing]


def _rollback_error(
    restoration: Restoration, cause: dict[str, Any], tx: int | None, changes: Sequence[Change]
) -> LedgerError:
    code = restoration.outcome()
    first = changes[0].path if changes else None
    return LedgerError(
        code,
        path=cause.get("path", first),
        details={
            "transaction": tx,
            "cause": cause,
            "restored": restoration.restored,
            "not_restored": restoration.not_restored,
        },
    )


def _intent(
    session: str,
    changes: Sequence[Change],
    summary: str,
    budget_charge: int,
    undo_of: int | None,
) -> TxIntent:
    blobs: dict[str, bytes] = {}
    mutations = []
    for ordinal, change in enumerate(changes):
        if change.before_hash is not None and change.before is not None:
            blobs[change.before_hash] = change.before
        if change.after_hash is not None and change.after is not None:
            blobs[change.after_hash] = change.after
        mutations.append(
            MutationRecord(
                ordinal=ordinal,
                op=change.op,
                path=change.path,
                destination=change.destination,
                before_hash=change.before_hash,
                after_hash=change.after_hash,
                before_mode=change.before_mode,
                after_mode=change.after_mode,
                kind=change.kind,
                before_kept=not unkept(change),
            )
        )
    return TxIntent(
        session=session,
        mutations=mutations,
        blobs=blobs,
        budget_charge=budget_charge,
        undo_of=undo_of,
        summary=summary,
    )


def change_of(
    mutation: MutationRecord, blobs: dict[str, bytes], label: Callable[[str], str]
) -> Change:
    """Rebuild a planned change from its journal record and stored images."""
    is_move = mutation.op == "move"
    return Change(
        op=mutation.op,
        path=mutation.path,
        label=label(mutation.path),
        kind="dir" if mutation.kind == "dir" else "file",
        destination=mutation.destination,
        destination_label=label(mutation.destination) if mutation.destination else None,
        before=blobs.get(mutation.before_hash) if mutation.before_hash else None,
        after=blobs.get(mutation.after_hash) if mutation.after_hash and not is_move else None,
        before_hash=mutation.before_hash,
        after_hash=mutation.after_hash,
        before_mode=mutation.before_mode,
        after_mode=mutation.after_mode,
    )


def folders_of(record: TxRecord) -> set[str]:
    """Every folder a transaction wrote in: where its temp files could be left."""
    folders = set()
    for mutation in record.mutations:
        folders.add(os.path.dirname(mutation.path))
        if mutation.destination:
            folders.add(os.path.dirname(mutation.destination))
    return folders
