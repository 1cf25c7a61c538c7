"""Reads by scope: heads, pages, runs, and the two streams (StreamRun, WatchThread)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from pai_grpc.domain import (
    TERMINAL_RUN_STATUSES,
    Message,
    PendingAction,
    Run,
    Thread,
    ThreadChangeKind,
)
from pai_grpc.errors import FailedPrecondition, InvalidArgument, NotFoundError
from pai_grpc.runtime._records import (
    encoded_from_record,
    message_from_record,
    pending_action_from_record,
    run_from_record,
    thread_from_record,
)
from pai_grpc.runtime._services import Services
from pai_grpc.runtime._validate import Violations, check_id, page_size
from pai_grpc.streams import EncodedRunEvent, RunFollower, ThreadHint
from storage import InvalidPageToken, MessageRecord, ThreadRecord
from storage import NotFound as StorageNotFound

#: Fallback poll interval when no wake-up arrives (cross-process on SQLite, lost NOTIFY).
FOLLOW_POLL_SECONDS = 0.5
#: Events per read of a run's log: a reader behind by more reads page after page.
LOG_PAGE_EVENTS = 500
WATCH_POLL_SECONDS = 1.0


@dataclass(frozen=True)
class ThreadChange:
    """One WatchThread event: the public head and what changed."""

    thread: Thread
    change: ThreadChangeKind
    message_ids: list[str] = field(default_factory=list)


def _public(record: ThreadRecord) -> tuple[object, ...]:
    """The client-visible projection of a head; private-only writes never change it."""
    return (record.status, record.metadata, record.message_count, record.active_run_id)


class Reads:
    """Scoped reads and streams."""

    services: Services

    async def get_thread(self, scope: str, thread_id: str) -> Thread:
        """A thread head of the scope."""
        v = Violations()
        check_id(v, "thread_id", "thr", thread_id)
        v.raise_if_any()
        record = await self.services.store.get_thread(scope, thread_id)
        if record is None:
            raise NotFoundError("thread", thread_id)
        return thread_from_record(record)

    async def list_threads(
        self, scope: str, *, page_size_: int = 0, page_token: str = ""
    ) -> tuple[list[Thread], str]:
        """The scope's threads, newest first."""
        v = Violations()
        size = page_size(v, page_size_, self.services.limits)
        v.raise_if_any()
        try:
            page = await self.services.store.list_threads(scope, limit=size, page_token=page_token)
        except InvalidPageToken as e:
            raise InvalidArgument.field("page_token", str(e), reason="INVALID_PAGE_TOKEN") from e
        return [thread_from_record(r) for r in page.items], page.next_page_token

    async def list_messages(
        self,
        scope: str,
        thread_id: str,
        *,
        page_size_: int = 0,
        page_token: str = "",
        order: str = "asc",
        after_message_id: str = "",
        before_message_id: str = "",
    ) -> tuple[list[Message], str]:
        """A page of the thread's transcript."""
        v = Violations()
        check_id(v, "thread_id", "thr", thread_id)
        check_id(v, "after_message_id", "msg", after_message_id, required=False)
        check_id(v, "before_message_id", "msg", before_message_id, required=False)
        size = page_size(v, page_size_, self.services.limits)
        v.raise_if_any()
        try:
            page = await self.services.store.list_messages(
                scope,
                thread_id,
                view="transcript",
                order=order,
                after_message_id=after_message_id or None,
                before_message_id=before_message_id or None,
                limit=size,
                page_token=page_token,
            )
        except InvalidPageToken as e:
            raise InvalidArgument.field("page_token", str(e), reason="INVALID_PAGE_TOKEN") from e
        except StorageNotFound as e:
            if e.kind == "message":
                field_ = "after_message_id" if e.key == after_message_id else "before_message_id"
                raise InvalidArgument.field(
                    field_, "is not a message of this thread", reason="UNKNOWN_MESSAGE"
                ) from e
            raise NotFoundError(e.kind, e.key) from e
        return [message_from_record(r) for r in page.items], page.next_page_token

    async def get_run(self, scope: str, run_id: str) -> tuple[Run, list[PendingAction]]:
        """A run of the scope with its open pending actions."""
        v = Violations()
        check_id(v, "run_id", "run", run_id)
        v.raise_if_any()
        record = await self.services.store.get_run(scope, run_id)
        if record is None:
            raise NotFoundError("run", run_id)
        pending = await self.services.store.list_pending_actions(scope, run_id, status="open")
        return run_from_record(record), [pending_action_from_record(p) for p in pending]

    async def list_runs(
        self, scope: str, thread_id: str, *, page_size_: int = 0, page_token: str = ""
    ) -> tuple[list[Run], str]:
        """The thread's runs, newest first."""
        v = Violations()
        check_id(v, "thread_id", "thr", thread_id)
        size = page_size(v, page_size_, self.services.limits)
        v.raise_if_any()
        try:
            page = await self.services.store.list_runs(
                scope, thread_id, limit=size, page_token=page_token
            )
        except InvalidPageToken as e:
            raise InvalidArgument.field("page_token", str(e), reason="INVALID_PAGE_TOKEN") from e
        except StorageNotFound as e:
            raise NotFoundError(e.kind, e.key) from e
        return [run_from_record(r) for r in page.items], page.next_page_token

    # ---- StreamRun ---------------------------------------------------------

    async def stream_run(
        self, scope: str, run_id: str, *, after_seq: int = 0
    ) -> AsyncIterator[EncodedRunEvent]:
        """Events of a run after ``after_seq``: the log first, then live, until terminal.

        Events of a run executing in this process come from its live channel
        the moment they are emitted; otherwise the chunk log is followed and
        readers are woken by commits (and, across processes, notifications).
        Each comes serialized (``pai.v1.RunEvent``), as the log stores it: the
        same bytes for every reader.
        """
        v = Violations()
        check_id(v, "run_id", "run", run_id)
        if after_seq < 0:
            v.add("after_seq", "must not be negative")
        v.raise_if_any()
        broker = self.services.broker
        channel = broker.channel(run_id)
        if channel is not None and channel.scope == scope and not channel.ended:
            # The run is executing in this process, in the caller's scope, and has
            # not ended: it exists and any cursor is in range, which is all the
            # read below would establish (one database read fewer per stream).
            return self._follow(scope, run_id, after_seq)
        ended = broker.ended(run_id)
        if ended is not None and ended.scope == scope:
            # It ended here moments ago: it exists, and where its log ends is known;
            # while memory still holds its events, they are its log.
            if after_seq > ended.last_seq:
                raise _beyond_end(run_id, ended.last_seq, after_seq)
            if after_seq == ended.last_seq:
                return _nothing()  # the caller has seen the terminal event already
            return self._follow(scope, run_id, after_seq)
        # Held from before the lookup: a commit announced meanwhile is kept, so
        # the lookup also tells whether the log has anything to read yet.
        follower = broker.follow(run_id)
        try:
            record = await self.services.store.get_run(scope, run_id)
            if record is None:
                raise NotFoundError("run", run_id)
            if after_seq > record.last_seq and record.status in TERMINAL_RUN_STATUSES:
                raise _beyond_end(run_id, record.last_seq, after_seq)
        except BaseException:
            follower.close()
            raise
        return self._follow(
            scope,
            run_id,
            after_seq,
            follower=follower,
            logged=record.last_seq,
            terminal=record.status in TERMINAL_RUN_STATUSES,
        )

    async def _follow(
        self,
        scope: str,
        run_id: str,
        cursor: int,
        *,
        follower: RunFollower | None = None,
        logged: int | None = None,
        terminal: bool = False,
    ) -> AsyncIterator[EncodedRunEvent]:
        """Events after ``cursor`` (``logged``, ``terminal``: the run as just looked up)."""
        broker, store = self.services.broker, self.services.store
        # Held from before the first read: a change announced while reading is kept.
        follower = follower or broker.follow(run_id)
        try:
            if logged is not None and logged <= cursor and broker.channel(run_id) is None:
                if terminal:
                    return  # the caller has seen the terminal event already
                # Nothing logged after the cursor yet (a run just sent, executing
                # elsewhere): its next commit is announced, so wait for it rather
                # than read the log, and ask the run's status, to find nothing.
                await follower.wait(FOLLOW_POLL_SECONDS)
            while True:
                channel = broker.channel(run_id)
                delivered = False
                if channel is not None and channel.covers(cursor):
                    # A publisher in a burst gives way to the loop every
                    # GIVE_WAY_SECONDS (StepOutput), so these sends get through.
                    for event in channel.since(cursor):
                        yield event
                        cursor = event.seq
                        delivered = True
                        if event.terminal:
                            return
                else:
                    ended = broker.ended(run_id) if channel is None else None
                    if ended is not None and ended.replays(cursor):
                        # Its execution ended here moments ago (before the stream
                        # began, or between two looks at the channel): the rest is
                        # in memory still.
                        for event in ended.since(cursor):
                            yield event
                        return
                    page = await store.read_events(
                        scope, run_id, after_seq=cursor, limit=LOG_PAGE_EVENTS
                    )
                    for rec in page:
                        event = encoded_from_record(rec)
                        yield event
                        cursor = event.seq
                        delivered = True
                        if event.terminal:
                            return
                    if len(page) == LOG_PAGE_EVENTS:
                        # A full page: the log holds more already, and nothing will
                        # announce it (it was committed before the read). Waiting
                        # here slept the poll interval per page of a backlog.
                        continue
                if delivered:
                    if channel is not None:
                        continue
                    # From the store: whatever was committed since the read began has
                    # been announced, so the wait below returns at once if there is
                    # more (no second read, nor a status read, just to find nothing).
                elif channel is None:
                    record = await store.get_run(scope, run_id)
                    if record is None:
                        return
                    if record.status in TERMINAL_RUN_STATUSES and record.last_seq <= cursor:
                        return
                await follower.wait(FOLLOW_POLL_SECONDS)
        finally:
            follower.close()

    # ---- WatchThread -------------------------------------------------------

    async def watch_thread(
        self, scope: str, thread_id: str, *, after_version: int = 0
    ) -> AsyncIterator[ThreadChange]:
        """Head events of a thread: a snapshot, then every client-visible change.

        Private metadata never appears, and a private-only write produces no
        event (LC-06): watchers compare the public projection of the head.
        """
        v = Violations()
        check_id(v, "thread_id", "thr", thread_id)
        if after_version < 0:
            v.add("after_version", "must not be negative")
        v.raise_if_any()
        hub = self.services.threads
        sub = hub.subscribe(thread_id)  # before reading, so no change slips between
        try:
            record = await self.services.store.get_thread(scope, thread_id)
            if record is None:
                raise NotFoundError("thread", thread_id)
        except BaseException:
            hub.unsubscribe(sub)
            raise
        return self._watch(scope, thread_id, record, after_version, sub)

    async def _watch(
        self,
        scope: str,
        thread_id: str,
        record: ThreadRecord,
        after_version: int,
        sub: object,
    ) -> AsyncIterator[ThreadChange]:
        from pai_grpc.streams import ThreadSubscription

        assert isinstance(sub, ThreadSubscription)
        store, hub = self.services.store, self.services.threads
        try:
            if record.version > after_version:
                yield ThreadChange(thread_from_record(record), "snapshot")
            last = record
            while True:
                hints: list[ThreadHint] = []
                with contextlib.suppress(TimeoutError):
                    hints.append(await asyncio.wait_for(sub.queue.get(), WATCH_POLL_SECONDS))
                while not sub.queue.empty():
                    hints.append(sub.queue.get_nowait())
                # The head and the transcript messages appended since the last one, from
                # one snapshot: committed messages are named from storage, so watchers
                # in every process see the same ids however (or in whatever order)
                # the hints reached them.
                try:
                    current, appended = await store.context(
                        scope, thread_id, view="transcript", from_position=last.message_count
                    )
                except StorageNotFound:
                    yield ThreadChange(thread_from_record(last), "deleted")
                    return
                for change in _changes(last, current, hints, appended):
                    yield change
                if _public(current) != _public(last) or any("visibility" in h.kinds for h in hints):
                    last = current
        finally:
            hub.unsubscribe(sub)


def _beyond_end(run_id: str, last_seq: int, after_seq: int) -> FailedPrecondition:
    return FailedPrecondition(
        f"run {run_id!r} ended at seq {last_seq}; after_seq {after_seq} is beyond it",
        reason="SEQ_OUT_OF_RANGE",
    )


async def _nothing() -> AsyncIterator[EncodedRunEvent]:
    """An empty stream of events."""
    return
    yield  # an async generator that ends at once


def _changes(
    before: ThreadRecord,
    after: ThreadRecord,
    hints: list[ThreadHint],
    appended: list[MessageRecord],
) -> list[ThreadChange]:
    """The client-visible changes between two heads.

    ``appended`` are the transcript messages at positions from ``before``'s
    count (read with ``after``); they name committed messages unless history
    was rewritten in between, when the hints name them instead.
    """
    head = thread_from_record(after)
    hinted: dict[str, list[str]] = {}
    for hint in hints:
        for kind in hint.kinds:
            ids = hinted.setdefault(kind, [])
            # A message is named once even if two hints of the batch carry it.
            ids.extend(i for i in hint.message_ids if i not in ids)
    out: list[ThreadChange] = []
    if after.status != before.status or after.active_run_id != before.active_run_id:
        out.append(ThreadChange(head, "status"))
    if after.message_count != before.message_count or "messages_removed" in hinted:
        if "messages_removed" in hinted or after.message_count < before.message_count:
            out.append(ThreadChange(head, "messages_removed", hinted.get("messages_removed", [])))
        if "messages_committed" in hinted or after.message_count > before.message_count:
            rewritten = (
                "messages_removed" in hinted
                or after.message_count < before.message_count
                or after.history_epoch != before.history_epoch
            )
            committed = (
                hinted.get("messages_committed", []) if rewritten else [m.id for m in appended]
            )
            out.append(ThreadChange(head, "messages_committed", committed))
    if after.metadata != before.metadata:
        out.append(ThreadChange(head, "metadata"))
    if "visibility" in hinted:
        out.append(ThreadChange(head, "visibility", hinted["visibility"]))
    return out
