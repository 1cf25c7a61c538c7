"""Records read from storage and the pieces of a write set.

Records are plain frozen dataclasses holding strict-JSON values; the runtime
converts them to its domain types. Storage never interprets agent data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Generic, TypeVar

from storage._json import JsonObject, JsonValue

T = TypeVar("T")


class _Sentinel:
    """A named marker value (``UNSET``, ``NOW``, ``PROMOTE_NEXT``)."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name

    def __bool__(self) -> bool:
        return False


#: The field is left unchanged.
UNSET = _Sentinel("UNSET")
#: Use the provider's clock (``now()`` on PostgreSQL).
NOW = _Sentinel("NOW")
#: Make the thread's next queued run active (or leave the thread idle).
PROMOTE_NEXT = _Sentinel("PROMOTE_NEXT")

#: Sequence numbers reserved at a time: by the claim that starts an execution,
#: and past the last event by every write of events (so live publication rarely waits).
SEQ_BLOCK = 1024

Unset = _Sentinel


@dataclass(frozen=True, slots=True)
class ThreadRecord:
    """A thread root."""

    id: str
    scope: str
    agent: str
    status: str
    version: int
    metadata: JsonObject
    private_metadata: JsonObject
    active_run_id: str | None
    message_count: int
    created_at: datetime
    updated_at: datetime
    #: Changes whenever existing messages are rewritten (updated or truncated).
    history_epoch: int = 0


@dataclass(frozen=True, slots=True)
class MessageRecord:
    """A committed message."""

    id: str
    thread_id: str
    position: int
    role: str
    parts: list[JsonValue]
    metadata: JsonObject
    private_metadata: JsonObject
    visible_transcript: bool
    visible_context: bool
    run_id: str | None
    step_index: int | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Lease:
    """Proof that an execution holds a run: owner plus the claim epoch."""

    run_id: str
    owner: str
    epoch: int
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A run."""

    id: str
    thread_id: str
    scope: str
    thread_seq: int
    status: str
    outcome: str | None
    reason: str | None
    initiator: str
    operation: str
    input: JsonObject
    started_at: datetime | None
    execution_started_at: datetime | None
    metadata: JsonObject
    private_metadata: JsonObject
    usage: JsonObject
    step_count: int
    attempts: int
    error: JsonObject | None
    hook_failures: list[JsonValue]
    lease_owner: str | None
    lease_expires_at: datetime | None
    lease_epoch: int
    last_seq: int
    created_at: datetime
    updated_at: datetime
    ended_at: datetime | None
    cancel_requested_at: datetime | None
    #: The durable sequence reservation: executions publish live only up to it.
    reserved_seq: int
    #: The W3C ``traceparent`` of the request that created the run (or ``None``).
    trace_context: str | None = None


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A renewed lease, and whether someone asked the holder to cancel."""

    lease: Lease
    cancel_requested: bool


@dataclass(frozen=True, slots=True)
class ClaimedRun:
    """A run claimed by a runner, with the lease that fences its writes."""

    run: RunRecord
    lease: Lease

    @property
    def first_seq(self) -> int:
        """The first sequence number this execution uses.

        The claim raised ``reserved_seq`` by :data:`SEQ_BLOCK` above every
        number an earlier execution may have published, so this is one past
        them: after a lost execution the log may skip numbers, never reuse one.
        """
        return self.run.reserved_seq - SEQ_BLOCK + 1


@dataclass(frozen=True, slots=True)
class PendingActionRecord:
    """A pending action of a waiting run."""

    id: str
    run_id: str
    thread_id: str
    kind: str
    status: str
    tool_call_id: str
    tool_name: str
    input: JsonValue
    request: JsonValue
    resolution: JsonValue
    message_id: str | None
    created_at: datetime
    resolved_at: datetime | None


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One entry of a run's event log.

    Entries logged since revision 0008 carry ``body`` (the bytes the runtime
    wrote, opaque here) and ``kind``; older ones carry their ``event`` as
    strict JSON and neither of the two.
    """

    run_id: str
    seq: int
    event: JsonObject | None
    body: bytes | None
    kind: str | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class IdempotencyRecord:
    """The original result of a request, keyed by its request id."""

    key: str
    fingerprint: str
    result: JsonObject


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a paginated read."""

    items: list[T]
    next_page_token: str = ""


# ---- write-set pieces -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NewThread:
    """A thread to create (its write set has no CAS: the id is new)."""

    id: str
    agent: str
    metadata: JsonObject = field(default_factory=dict)
    private_metadata: JsonObject = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ThreadPatch:
    """Root fields to change. The version is always incremented by a root write."""

    status: str | _Sentinel = UNSET
    metadata: JsonObject | _Sentinel = UNSET
    private_metadata: JsonObject | _Sentinel = UNSET
    #: A run id, ``None`` (no active run), or ``PROMOTE_NEXT``.
    active_run_id: str | None | _Sentinel = UNSET


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A message to append; the provider assigns its dense position."""

    id: str
    role: str
    parts: list[JsonValue]
    metadata: JsonObject = field(default_factory=dict)
    private_metadata: JsonObject = field(default_factory=dict)
    visible_transcript: bool = True
    visible_context: bool = True
    run_id: str | None = None
    step_index: int | None = None


@dataclass(frozen=True, slots=True)
class MessagePatch:
    """Changes to one message of the thread."""

    id: str
    parts: list[JsonValue] | _Sentinel = UNSET
    metadata: JsonObject | _Sentinel = UNSET
    private_metadata: JsonObject | _Sentinel = UNSET
    visible_transcript: bool | _Sentinel = UNSET
    visible_context: bool | _Sentinel = UNSET


@dataclass(frozen=True, slots=True)
class NewRun:
    """A run to insert (started on an idle thread, or queued behind the active run)."""

    id: str
    status: str
    initiator: str
    operation: str
    input: JsonObject = field(default_factory=dict)
    metadata: JsonObject = field(default_factory=dict)
    private_metadata: JsonObject = field(default_factory=dict)
    #: Hand the new active run straight to this runner: it is inserted already
    #: claimed (status running, epoch 1) with a lease of ``lease_seconds``.
    lease_owner: str | None = None
    lease_seconds: float = 30.0
    #: The W3C ``traceparent`` of the creating request, continued by every execution.
    trace_context: str | None = None


@dataclass(frozen=True, slots=True)
class RunUpdate:
    """Changes to one run.

    With ``lease`` the update is fenced: it applies only while that lease is
    held (owner, epoch, not expired by the provider's clock), else the whole
    write set fails with :class:`~storage.errors.LeaseLost`. Without a lease,
    ``expect_status`` (if given) guards the update instead.
    """

    id: str
    lease: Lease | None = None
    expect_status: tuple[str, ...] | None = None
    #: Guard for event-log writers that do not hold a lease (queued/waiting runs).
    expect_last_seq: int | None = None
    #: Guard: nobody holds a live lease on the run (for writers without one).
    expect_unleased: bool = False
    status: str | _Sentinel = UNSET
    outcome: str | None | _Sentinel = UNSET
    reason: str | None | _Sentinel = UNSET
    operation: str | _Sentinel = UNSET
    input: JsonObject | _Sentinel = UNSET
    started_at: datetime | _Sentinel = UNSET
    execution_started_at: datetime | _Sentinel = UNSET
    metadata: JsonObject | _Sentinel = UNSET
    private_metadata: JsonObject | _Sentinel = UNSET
    usage: JsonObject | _Sentinel = UNSET
    step_count: int | _Sentinel = UNSET
    error: JsonObject | None | _Sentinel = UNSET
    hook_failures: list[JsonValue] | _Sentinel = UNSET
    last_seq: int | _Sentinel = UNSET
    #: The sequence reservation (see :attr:`RunRecord.reserved_seq`); never below last_seq.
    reserved_seq: int | _Sentinel = UNSET
    ended_at: datetime | None | _Sentinel = UNSET
    #: Ask the lease holder to cancel (it stops its episode and writes the cancellation).
    cancel_requested_at: datetime | _Sentinel = UNSET
    #: Drop the lease (the run becomes claimable again, or is terminal).
    release_lease: bool = False


@dataclass(frozen=True, slots=True)
class NewPendingAction:
    """A pending action to open."""

    id: str
    run_id: str
    kind: str
    tool_call_id: str
    tool_name: str
    input: JsonValue = None
    request: JsonValue = None
    message_id: str | None = None


@dataclass(frozen=True, slots=True)
class PendingActionPatch:
    """Resolve or cancel a pending action; fails unless it is in ``expect_status``."""

    id: str
    status: str
    expect_status: tuple[str, ...] = ("open",)
    resolution: JsonValue = None


@dataclass(slots=True)
class NewEvent:
    """A run event-log entry (chunk-log batch member).

    Storage never looks inside ``body``: the writer serialized the whole event
    (its seq and time included), and readers get the same bytes back. Not
    frozen, though nothing changes one: a step makes one per delta, and a
    frozen dataclass sets each field through ``object.__setattr__`` (1.05 us
    against 0.26 to make one).
    """

    run_id: str
    seq: int
    body: bytes
    #: What the event is (its arm, or its chunk type for chunks): compaction
    #: removes the kinds in :data:`storage.DELTA_TYPES`.
    kind: str
    #: When the event happened (the time its body carries).
    time: datetime


@dataclass(slots=True)
class WriteSet:
    """Everything one transition writes, applied atomically or not at all.

    The root (thread) update is guarded by ``expected_version`` and/or
    ``expected_private_metadata`` when given, and happens whenever the thread
    patch is present or messages are appended, changed or truncated (message
    changes always bump the version and allocate dense positions under the
    root row lock). Run patches with a lease are fenced by it.
    """

    scope: str
    thread_id: str
    new_thread: NewThread | None = None
    expected_version: int | None = None
    expected_private_metadata: JsonObject | None = None
    #: A narrower root guard: the thread status must be one of these.
    expected_status: tuple[str, ...] | None = None
    #: Guard: no message was appended or removed since the caller counted them.
    expected_message_count: int | None = None
    #: Guard: the thread's active run is this one (None: it has none; UNSET: no
    #: guard). A write to a queued run takes it so a concurrent promotion of
    #: that run refuses it, and so that a promotion waiting for it sees it.
    expected_active_run: str | None | _Sentinel = UNSET
    thread: ThreadPatch | None = None
    append_messages: list[NewMessage] = field(default_factory=list)
    update_messages: list[MessagePatch] = field(default_factory=list)
    #: Delete this message and every later one (regeneration).
    truncate_from_message_id: str | None = None
    insert_runs: list[NewRun] = field(default_factory=list)
    update_runs: list[RunUpdate] = field(default_factory=list)
    insert_pending: list[NewPendingAction] = field(default_factory=list)
    update_pending: list[PendingActionPatch] = field(default_factory=list)
    events: list[NewEvent] = field(default_factory=list)
    idempotency: IdempotencyRecord | None = None
    #: Quota checked with ``insert_runs``: the scope may hold at most this many
    #: queued, running or waiting runs, the new ones included (0: no quota).
    max_active_runs: int = 0
    #: (channel, payload) notifications delivered on commit (PostgreSQL NOTIFY;
    #: a no-op on SQLite, where readers and runners poll).
    notify: list[tuple[str, str]] = field(default_factory=list)
    #: Notifications delivered only when the write's ``PROMOTE_NEXT`` left the
    #: thread with an active run (a runner wake-up for a run that became runnable;
    #: sending it otherwise would make every runner look for work in vain).
    notify_if_promoted: list[tuple[str, str]] = field(default_factory=list)
    #: Written without reading the thread first: a refused guard is an expected
    #: outcome (the writer reads and decides again), not contention to report.
    speculative: bool = False

    @property
    def touches_root(self) -> bool:
        """Whether this write set updates the thread root (and its version)."""
        return bool(
            self.new_thread is not None
            or self.thread is not None
            or self.append_messages
            or self.update_messages
            or self.truncate_from_message_id is not None
            or self.expected_version is not None
            or self.expected_private_metadata is not None
            or self.expected_status is not None
            or self.expected_message_count is not None
            or self.expected_active_run is not UNSET
        )


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What a committed write set produced."""

    thread: ThreadRecord | None
    messages: list[MessageRecord]
    removed_message_ids: list[str]
    runs: list[RunRecord]
