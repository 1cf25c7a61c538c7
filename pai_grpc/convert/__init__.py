"""The single conversion layer between the ``pai.v1`` protobuf contract and the domain.

Servicers call ``*_from_proto`` on what arrives and ``*_to_proto`` on what
leaves; no protobuf type travels further into the runtime.

Conventions:

* Domain ``X | None`` fields are unset proto fields (``HasField``).
  JSON ``null`` in a ``google.protobuf.Value`` field is also sent unset,
  so both read back as ``None``.
* Domain JSON objects that default to ``{}`` (``metadata``) are always
  sent; an unset ``Struct`` reads back as ``{}``.
* JSON numbers are doubles on the wire; integral values within
  ``±(2**53 - 1)`` read back as ``int``.
* Timestamps are aware UTC datetimes with microsecond precision.
* Every ``*_from_proto`` raises :class:`ValueError` naming the field when a
  required oneof or message is unset, a required enum is UNSPECIFIED or
  unknown, or JSON is not strict (NaN, infinities, ...). Servicers map it to
  ``INVALID_ARGUMENT``. ``*_to_proto`` raises :class:`ValueError` for
  non-strict JSON, naive datetimes and integers that overflow their field.
"""

from pai_grpc.convert._chunks import (
    chunk_from_proto,
    chunk_to_proto,
    finish_reason_from_proto,
    finish_reason_to_proto,
    usage_from_proto,
    usage_to_proto,
)
from pai_grpc.convert._json import (
    struct_from_proto,
    struct_to_proto,
    timestamp_from_proto,
    timestamp_to_proto,
    value_from_proto,
    value_to_proto,
)
from pai_grpc.convert._parts import (
    part_from_proto,
    part_state_from_proto,
    part_state_to_proto,
    part_to_proto,
    tool_state_from_proto,
    tool_state_to_proto,
)
from pai_grpc.convert._runs import (
    pending_action_from_proto,
    pending_action_kind_from_proto,
    pending_action_kind_to_proto,
    pending_action_status_from_proto,
    pending_action_status_to_proto,
    pending_action_to_proto,
    run_event_from_proto,
    run_event_to_proto,
    run_from_proto,
    run_handle_from_proto,
    run_handle_to_proto,
    run_initiator_from_proto,
    run_initiator_to_proto,
    run_operation_from_proto,
    run_operation_to_proto,
    run_outcome_from_proto,
    run_outcome_to_proto,
    run_status_from_proto,
    run_status_to_proto,
    run_to_proto,
)
from pai_grpc.convert._threads import (
    lifecycle_message_from_proto,
    lifecycle_message_to_proto,
    message_from_proto,
    message_to_proto,
    message_view_from_proto,
    message_view_to_proto,
    role_from_proto,
    role_to_proto,
    sort_order_from_proto,
    sort_order_to_proto,
    thread_from_proto,
    thread_status_from_proto,
    thread_status_to_proto,
    thread_to_proto,
    visibility_from_proto,
    visibility_to_proto,
)

__all__ = [
    "chunk_from_proto",
    "chunk_to_proto",
    "finish_reason_from_proto",
    "finish_reason_to_proto",
    "lifecycle_message_from_proto",
    "lifecycle_message_to_proto",
    "message_from_proto",
    "message_to_proto",
    "message_view_from_proto",
    "message_view_to_proto",
    "part_from_proto",
    "part_state_from_proto",
    "part_state_to_proto",
    "part_to_proto",
    "pending_action_from_proto",
    "pending_action_kind_from_proto",
    "pending_action_kind_to_proto",
    "pending_action_status_from_proto",
    "pending_action_status_to_proto",
    "pending_action_to_proto",
    "role_from_proto",
    "role_to_proto",
    "run_event_from_proto",
    "run_event_to_proto",
    "run_from_proto",
    "run_handle_from_proto",
    "run_handle_to_proto",
    "run_initiator_from_proto",
    "run_initiator_to_proto",
    "run_operation_from_proto",
    "run_operation_to_proto",
    "run_outcome_from_proto",
    "run_outcome_to_proto",
    "run_status_from_proto",
    "run_status_to_proto",
    "run_to_proto",
    "sort_order_from_proto",
    "sort_order_to_proto",
    "struct_from_proto",
    "struct_to_proto",
    "thread_from_proto",
    "thread_status_from_proto",
    "thread_status_to_proto",
    "thread_to_proto",
    "timestamp_from_proto",
    "timestamp_to_proto",
    "tool_state_from_proto",
    "tool_state_to_proto",
    "usage_from_proto",
    "usage_to_proto",
    "value_from_proto",
    "value_to_proto",
    "visibility_from_proto",
    "visibility_to_proto",
]
