import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from pai.v1 import parts_pb2 as _parts_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ThreadStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    THREAD_STATUS_UNSPECIFIED: _ClassVar[ThreadStatus]
    THREAD_STATUS_IDLE: _ClassVar[ThreadStatus]
    THREAD_STATUS_RUNNING: _ClassVar[ThreadStatus]
    THREAD_STATUS_WAITING: _ClassVar[ThreadStatus]

class MessageRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MESSAGE_ROLE_UNSPECIFIED: _ClassVar[MessageRole]
    MESSAGE_ROLE_SYSTEM: _ClassVar[MessageRole]
    MESSAGE_ROLE_USER: _ClassVar[MessageRole]
    MESSAGE_ROLE_ASSISTANT: _ClassVar[MessageRole]

class MessageView(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MESSAGE_VIEW_UNSPECIFIED: _ClassVar[MessageView]
    MESSAGE_VIEW_TRANSCRIPT: _ClassVar[MessageView]
    MESSAGE_VIEW_CONTEXT: _ClassVar[MessageView]
    MESSAGE_VIEW_ALL: _ClassVar[MessageView]

class SortOrder(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SORT_ORDER_UNSPECIFIED: _ClassVar[SortOrder]
    SORT_ORDER_ASC: _ClassVar[SortOrder]
    SORT_ORDER_DESC: _ClassVar[SortOrder]
THREAD_STATUS_UNSPECIFIED: ThreadStatus
THREAD_STATUS_IDLE: ThreadStatus
THREAD_STATUS_RUNNING: ThreadStatus
THREAD_STATUS_WAITING: ThreadStatus
MESSAGE_ROLE_UNSPECIFIED: MessageRole
MESSAGE_ROLE_SYSTEM: MessageRole
MESSAGE_ROLE_USER: MessageRole
MESSAGE_ROLE_ASSISTANT: MessageRole
MESSAGE_VIEW_UNSPECIFIED: MessageView
MESSAGE_VIEW_TRANSCRIPT: MessageView
MESSAGE_VIEW_CONTEXT: MessageView
MESSAGE_VIEW_ALL: MessageView
SORT_ORDER_UNSPECIFIED: SortOrder
SORT_ORDER_ASC: SortOrder
SORT_ORDER_DESC: SortOrder

class Thread(_message.Message):
    __slots__ = ("id", "agent", "status", "version", "etag", "metadata", "active_run_id", "message_count", "create_time", "update_time")
    ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    id: str
    agent: str
    status: ThreadStatus
    version: int
    etag: str
    metadata: _struct_pb2.Struct
    active_run_id: str
    message_count: int
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., agent: _Optional[str] = ..., status: _Optional[_Union[ThreadStatus, str]] = ..., version: _Optional[int] = ..., etag: _Optional[str] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., active_run_id: _Optional[str] = ..., message_count: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("id", "thread_id", "role", "parts", "metadata", "position", "run_id", "step_index", "create_time")
    ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_INDEX_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    id: str
    thread_id: str
    role: MessageRole
    parts: _containers.RepeatedCompositeFieldContainer[_parts_pb2.MessagePart]
    metadata: _struct_pb2.Struct
    position: int
    run_id: str
    step_index: int
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., thread_id: _Optional[str] = ..., role: _Optional[_Union[MessageRole, str]] = ..., parts: _Optional[_Iterable[_Union[_parts_pb2.MessagePart, _Mapping]]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., position: _Optional[int] = ..., run_id: _Optional[str] = ..., step_index: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class MessageVisibility(_message.Message):
    __slots__ = ("transcript", "context")
    TRANSCRIPT_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    transcript: bool
    context: bool
    def __init__(self, transcript: _Optional[bool] = ..., context: _Optional[bool] = ...) -> None: ...

class LifecycleMessage(_message.Message):
    __slots__ = ("message", "visibility", "private_metadata")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_FIELD_NUMBER: _ClassVar[int]
    PRIVATE_METADATA_FIELD_NUMBER: _ClassVar[int]
    message: Message
    visibility: MessageVisibility
    private_metadata: _struct_pb2.Struct
    def __init__(self, message: _Optional[_Union[Message, _Mapping]] = ..., visibility: _Optional[_Union[MessageVisibility, _Mapping]] = ..., private_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...
