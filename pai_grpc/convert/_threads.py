"""Threads and messages: domain <-> ``pai.v1.Thread``/``Message``/``LifecycleMessage``.

Also the ``ThreadStatus``, ``MessageRole``, ``MessageView``, ``SortOrder``
and the ThreadService's ``Delivery`` and ``ThreadChange`` enum maps.
``Thread.etag`` is written from the domain's ``etag`` property and ignored
when reading. ``metadata`` and ``private_metadata`` are always sent; an
unset ``Struct`` reads as ``{}``.
An unset ``LifecycleMessage.visibility`` reads as the domain default
(visible everywhere), matching the contract's "unset means visible".
"""

from __future__ import annotations

from pai.v1 import thread_service_pb2, threads_pb2
from pai_grpc.convert._json import (
    EnumMap,
    object_from_proto,
    require_field,
    required_timestamp_from_proto,
    struct_to_proto,
    timestamp_to_proto,
)
from pai_grpc.convert._parts import part_from_proto, part_to_proto
from pai_grpc.domain import (
    Delivery,
    LifecycleMessage,
    Message,
    MessageView,
    Role,
    SortOrder,
    Thread,
    ThreadChangeKind,
    ThreadStatus,
    Visibility,
)

THREAD_STATUSES: EnumMap[ThreadStatus, threads_pb2.ThreadStatus] = EnumMap(
    "ThreadStatus",
    {
        "idle": threads_pb2.THREAD_STATUS_IDLE,
        "running": threads_pb2.THREAD_STATUS_RUNNING,
        "waiting": threads_pb2.THREAD_STATUS_WAITING,
    },
)

ROLES: EnumMap[Role, threads_pb2.MessageRole] = EnumMap(
    "MessageRole",
    {
        "system": threads_pb2.MESSAGE_ROLE_SYSTEM,
        "user": threads_pb2.MESSAGE_ROLE_USER,
        "assistant": threads_pb2.MESSAGE_ROLE_ASSISTANT,
    },
)

MESSAGE_VIEWS: EnumMap[MessageView, threads_pb2.MessageView] = EnumMap(
    "MessageView",
    {
        "transcript": threads_pb2.MESSAGE_VIEW_TRANSCRIPT,
        "context": threads_pb2.MESSAGE_VIEW_CONTEXT,
        "all": threads_pb2.MESSAGE_VIEW_ALL,
    },
)

DELIVERIES: EnumMap[Delivery, thread_service_pb2.Delivery] = EnumMap(
    "Delivery",
    {"queue": thread_service_pb2.DELIVERY_QUEUE, "steer": thread_service_pb2.DELIVERY_STEER},
)

THREAD_CHANGES: EnumMap[ThreadChangeKind, thread_service_pb2.ThreadChange] = EnumMap(
    "ThreadChange",
    {
        "snapshot": thread_service_pb2.THREAD_CHANGE_SNAPSHOT,
        "status": thread_service_pb2.THREAD_CHANGE_STATUS,
        "messages_committed": thread_service_pb2.THREAD_CHANGE_MESSAGES_COMMITTED,
        "messages_removed": thread_service_pb2.THREAD_CHANGE_MESSAGES_REMOVED,
        "visibility": thread_service_pb2.THREAD_CHANGE_VISIBILITY,
        "metadata": thread_service_pb2.THREAD_CHANGE_METADATA,
        "deleted": thread_service_pb2.THREAD_CHANGE_DELETED,
    },
)

SORT_ORDERS: EnumMap[SortOrder, threads_pb2.SortOrder] = EnumMap(
    "SortOrder",
    {"asc": threads_pb2.SORT_ORDER_ASC, "desc": threads_pb2.SORT_ORDER_DESC},
)


# ------------------------------------------------------------------------ enums


def thread_status_to_proto(value: ThreadStatus) -> threads_pb2.ThreadStatus:
    """Map a domain thread status to the proto enum."""
    return THREAD_STATUSES.to_proto(value)


def thread_status_from_proto(value: int, *, field: str = "ThreadStatus") -> ThreadStatus:
    """Map a proto thread status.

    Raises:
        ValueError: The status is UNSPECIFIED or unknown.
    """
    return THREAD_STATUSES.from_proto(value, field)


def role_to_proto(value: Role) -> threads_pb2.MessageRole:
    """Map a domain message role to the proto enum."""
    return ROLES.to_proto(value)


def role_from_proto(value: int, *, field: str = "MessageRole") -> Role:
    """Map a proto message role.

    Raises:
        ValueError: The role is UNSPECIFIED or unknown.
    """
    return ROLES.from_proto(value, field)


def delivery_to_proto(value: Delivery) -> thread_service_pb2.Delivery:
    """Map a domain delivery to the proto enum."""
    return DELIVERIES.to_proto(value)


def delivery_from_proto(value: int, *, field: str = "delivery") -> Delivery:
    """Map a proto delivery; UNSPECIFIED is ``queue`` (the contract's default).

    Raises:
        ValueError: The delivery is unknown.
    """
    return DELIVERIES.from_proto(value, field, default="queue")


def thread_change_to_proto(value: ThreadChangeKind) -> thread_service_pb2.ThreadChange:
    """Map what a thread-watch event reports changed to the proto enum."""
    return THREAD_CHANGES.to_proto(value)


def thread_change_from_proto(value: int, *, field: str = "change") -> ThreadChangeKind:
    """Map a proto thread change.

    Raises:
        ValueError: The change is UNSPECIFIED or unknown.
    """
    return THREAD_CHANGES.from_proto(value, field)


def message_view_to_proto(value: MessageView) -> threads_pb2.MessageView:
    """Map a domain message view to the proto enum."""
    return MESSAGE_VIEWS.to_proto(value)


def message_view_from_proto(
    value: int, *, default: MessageView | None = None, field: str = "MessageView"
) -> MessageView:
    """Map a proto message view (a request parameter).

    Args:
        value: The enum number.
        default: What UNSPECIFIED means at this call site; ``None`` makes it an error.
        field: The request field, for the error message.

    Raises:
        ValueError: The view is unknown, or UNSPECIFIED without a default.
    """
    return MESSAGE_VIEWS.from_proto(value, field, default=default)


def sort_order_to_proto(value: SortOrder) -> threads_pb2.SortOrder:
    """Map a domain sort order to the proto enum."""
    return SORT_ORDERS.to_proto(value)


def sort_order_from_proto(
    value: int, *, default: SortOrder | None = None, field: str = "SortOrder"
) -> SortOrder:
    """Map a proto sort order (a request parameter).

    Args:
        value: The enum number.
        default: What UNSPECIFIED means at this call site; ``None`` makes it an error.
        field: The request field, for the error message.

    Raises:
        ValueError: The order is unknown, or UNSPECIFIED without a default.
    """
    return SORT_ORDERS.from_proto(value, field, default=default)


# ----------------------------------------------------------------------- thread


def thread_to_proto(thread: Thread) -> threads_pb2.Thread:
    """Convert a domain thread head to ``pai.v1.Thread`` (``etag`` from the version).

    Raises:
        ValueError: The metadata is not strict JSON, or a timestamp is naive.
    """
    return threads_pb2.Thread(
        id=thread.id,
        agent=thread.agent,
        status=thread_status_to_proto(thread.status),
        version=thread.version,
        etag=thread.etag,
        metadata=struct_to_proto(thread.metadata, path="Thread.metadata"),
        active_run_id=thread.active_run_id,
        message_count=thread.message_count,
        create_time=timestamp_to_proto(thread.created_at),
        update_time=timestamp_to_proto(thread.updated_at),
    )


def thread_from_proto(pb: threads_pb2.Thread) -> Thread:
    """Convert a ``pai.v1.Thread`` to the domain (``etag`` is ignored).

    Raises:
        ValueError: The status is UNSPECIFIED, a timestamp is unset, or the
            metadata is not strict JSON.
    """
    return Thread(
        id=pb.id,
        agent=pb.agent,
        status=thread_status_from_proto(pb.status, field="Thread.status"),
        version=pb.version,
        metadata=object_from_proto(pb, "metadata"),
        active_run_id=pb.active_run_id if pb.HasField("active_run_id") else None,
        message_count=pb.message_count,
        created_at=required_timestamp_from_proto(pb, "create_time"),
        updated_at=required_timestamp_from_proto(pb, "update_time"),
    )


# ---------------------------------------------------------------------- message


def message_to_proto(message: Message) -> threads_pb2.Message:
    """Convert a domain message to ``pai.v1.Message``.

    Raises:
        ValueError: A part or the metadata is not strict JSON, or the
            timestamp is naive.
    """
    return threads_pb2.Message(
        id=message.id,
        thread_id=message.thread_id,
        role=role_to_proto(message.role),
        parts=[part_to_proto(part) for part in message.parts],
        metadata=struct_to_proto(message.metadata, path="Message.metadata"),
        position=message.position,
        run_id=message.run_id,
        step_index=message.step_index,
        create_time=timestamp_to_proto(message.created_at),
    )


def message_from_proto(pb: threads_pb2.Message) -> Message:
    """Convert a ``pai.v1.Message`` to the domain.

    Raises:
        ValueError: The role is UNSPECIFIED, a part has no arm set,
            ``create_time`` is unset, or JSON is not strict.
    """
    return Message(
        id=pb.id,
        thread_id=pb.thread_id,
        role=role_from_proto(pb.role, field="Message.role"),
        parts=[part_from_proto(part) for part in pb.parts],
        metadata=object_from_proto(pb, "metadata"),
        position=pb.position,
        run_id=pb.run_id if pb.HasField("run_id") else None,
        step_index=pb.step_index if pb.HasField("step_index") else None,
        created_at=required_timestamp_from_proto(pb, "create_time"),
    )


def visibility_to_proto(visibility: Visibility) -> threads_pb2.MessageVisibility:
    """Convert message visibility to ``pai.v1.MessageVisibility``."""
    return threads_pb2.MessageVisibility(
        transcript=visibility.transcript, context=visibility.context
    )


def visibility_from_proto(pb: threads_pb2.MessageVisibility) -> Visibility:
    """Convert ``pai.v1.MessageVisibility`` to the domain."""
    return Visibility(transcript=pb.transcript, context=pb.context)


def lifecycle_message_to_proto(message: LifecycleMessage) -> threads_pb2.LifecycleMessage:
    """Convert a lifecycle message (visibility, private metadata) to the proto.

    Raises:
        ValueError: As :func:`message_to_proto`, or the private metadata is
            not strict JSON.
    """
    return threads_pb2.LifecycleMessage(
        message=message_to_proto(message.message),
        visibility=visibility_to_proto(message.visibility),
        private_metadata=struct_to_proto(
            message.private_metadata, path="LifecycleMessage.private_metadata"
        ),
    )


def lifecycle_message_from_proto(pb: threads_pb2.LifecycleMessage) -> LifecycleMessage:
    """Convert a ``pai.v1.LifecycleMessage`` to the domain.

    Raises:
        ValueError: ``message`` is unset, or as :func:`message_from_proto`.
    """
    require_field(pb, "message")
    visibility = visibility_from_proto(pb.visibility) if pb.HasField("visibility") else Visibility()
    return LifecycleMessage(
        message=message_from_proto(pb.message),
        visibility=visibility,
        private_metadata=object_from_proto(pb, "private_metadata"),
    )
