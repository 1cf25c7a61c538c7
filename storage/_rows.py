"""Row -> record conversion and small SQL helpers shared by the provider's statements."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, Row

from storage._json import check_strict_json
from storage._records import (
    NOW,
    UNSET,
    EventRecord,
    Lease,
    MessageRecord,
    PendingActionRecord,
    RunRecord,
    ThreadRecord,
    WriteSet,
)
from storage._schema import messages, runs

MAX_PAGE_SIZE = 1000


def aware(value: datetime | None) -> datetime | None:
    """Attach UTC to naive datetimes (SQLite returns them naive; everything stored is UTC)."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def required(value: datetime | None) -> datetime:
    """An aware datetime that must be present."""
    out = aware(value)
    assert out is not None
    return out


def thread_record(row: Row[Any]) -> ThreadRecord:
    """A threads row as a record."""
    m = row._mapping
    return ThreadRecord(
        id=m["id"],
        scope=m["scope"],
        agent=m["agent"],
        status=m["status"],
        version=m["version"],
        metadata=m["metadata"],
        private_metadata=m["private_metadata"],
        active_run_id=m["active_run_id"],
        message_count=m["next_position"],
        created_at=required(m["created_at"]),
        updated_at=required(m["updated_at"]),
        history_epoch=m["history_epoch"],
    )


def message_record(row: Row[Any]) -> MessageRecord:
    """A messages row as a record."""
    m = row._mapping
    return MessageRecord(
        id=m["id"],
        thread_id=m["thread_id"],
        position=m["position"],
        role=m["role"],
        parts=m["parts"],
        metadata=m["metadata"],
        private_metadata=m["private_metadata"],
        visible_transcript=m["visible_transcript"],
        visible_context=m["visible_context"],
        run_id=m["run_id"],
        step_index=m["step_index"],
        created_at=required(m["created_at"]),
    )


def run_record(row: Row[Any]) -> RunRecord:
    """A runs row as a record."""
    m = row._mapping
    return RunRecord(
        id=m["id"],
        thread_id=m["thread_id"],
        scope=m["scope"],
        thread_seq=m["thread_seq"],
        status=m["status"],
        outcome=m["outcome"],
        reason=m["reason"],
        initiator=m["initiator"],
        operation=m["operation"],
        input=m["input"],
        started_at=aware(m["started_at"]),
        execution_started_at=aware(m["execution_started_at"]),
        metadata=m["metadata"],
        private_metadata=m["private_metadata"],
        usage=m["usage"],
        step_count=m["step_count"],
        attempts=m["attempts"],
        error=m["error"],
        hook_failures=m["hook_failures"],
        lease_owner=m["lease_owner"],
        lease_expires_at=aware(m["lease_expires_at"]),
        lease_epoch=m["lease_epoch"],
        last_seq=m["last_seq"],
        reserved_seq=m["reserved_seq"],
        trace_context=m["trace_context"],
        created_at=required(m["created_at"]),
        updated_at=required(m["updated_at"]),
        ended_at=aware(m["ended_at"]),
        cancel_requested_at=aware(m["cancel_requested_at"]),
    )


def pending_record(row: Row[Any]) -> PendingActionRecord:
    """A pending_actions row as a record."""
    m = row._mapping
    return PendingActionRecord(
        id=m["id"],
        run_id=m["run_id"],
        thread_id=m["thread_id"],
        kind=m["kind"],
        status=m["status"],
        tool_call_id=m["tool_call_id"],
        tool_name=m["tool_name"],
        input=m["input"],
        request=m["request"],
        resolution=m["resolution"],
        message_id=m["message_id"],
        created_at=required(m["created_at"]),
        resolved_at=aware(m["resolved_at"]),
    )


def set_value(values: dict[str, Any], name: str, value: object, now: datetime) -> None:
    """Add ``name`` to an UPDATE's values unless it is UNSET; NOW means the provider clock."""
    if value is UNSET:
        return
    values[name] = now if value is NOW else value


def check_write_set_json(ws: WriteSet) -> None:
    """Reject non-strict JSON anywhere in the write set, before any I/O."""

    def check(value: object, path: str) -> None:
        if value is not UNSET:
            check_strict_json(value, path=path)

    if ws.new_thread is not None:
        check(ws.new_thread.metadata, "thread.metadata")
        check(ws.new_thread.private_metadata, "thread.private_metadata")
    if ws.expected_private_metadata is not None:
        check(ws.expected_private_metadata, "expected_private_metadata")
    if ws.thread is not None:
        check(ws.thread.metadata, "thread.metadata")
        check(ws.thread.private_metadata, "thread.private_metadata")
    for i, m in enumerate(ws.append_messages):
        check(m.parts, f"messages[{i}].parts")
        check(m.metadata, f"messages[{i}].metadata")
        check(m.private_metadata, f"messages[{i}].private_metadata")
    for i, mp in enumerate(ws.update_messages):
        check(mp.parts, f"update_messages[{i}].parts")
        check(mp.metadata, f"update_messages[{i}].metadata")
        check(mp.private_metadata, f"update_messages[{i}].private_metadata")
    for i, r in enumerate(ws.insert_runs):
        check(r.input, f"runs[{i}].input")
        check(r.metadata, f"runs[{i}].metadata")
        check(r.private_metadata, f"runs[{i}].private_metadata")
    for i, rp in enumerate(ws.update_runs):
        for name in ("input", "metadata", "private_metadata", "usage", "error", "hook_failures"):
            check(getattr(rp, name), f"update_runs[{i}].{name}")
    for i, p in enumerate(ws.insert_pending):
        check(p.input, f"pending[{i}].input")
        check(p.request, f"pending[{i}].request")
    for i, pp in enumerate(ws.update_pending):
        check(pp.resolution, f"update_pending[{i}].resolution")
    if ws.idempotency is not None:
        check(ws.idempotency.result, "idempotency.result")


def fence(lease: Lease, now: datetime) -> list[ColumnElement[bool]]:
    """``owner = me AND epoch = mine AND expires_at > provider now``."""
    return [
        runs.c.lease_owner == lease.owner,
        runs.c.lease_epoch == lease.epoch,
        runs.c.lease_expires_at > now,
    ]


def view_conditions(view: str) -> Iterable[ColumnElement[bool]]:
    """WHERE conditions of a message view."""
    if view == "transcript":
        return [messages.c.visible_transcript.is_(True)]
    if view == "context":
        return [messages.c.visible_context.is_(True)]
    if view == "all":
        return []
    raise ValueError(f"unknown message view {view!r}")


def page_limit(limit: int) -> int:
    """Clamp a requested page size to 1..MAX_PAGE_SIZE."""
    return max(1, min(int(limit), MAX_PAGE_SIZE))


def event_record(row: Row[Any]) -> EventRecord:
    """A run_events row as a record."""
    m = row._mapping
    return EventRecord(
        run_id=m["run_id"],
        seq=m["seq"],
        event=m["event"],
        body=m["body"],
        kind=m["kind"],
        created_at=required(m["created_at"]),
    )
