from google.protobuf import struct_pb2 as _struct_pb2
from pai.v1 import parts_pb2 as _parts_pb2
from pai.v1 import runs_pb2 as _runs_pb2
from pai.v1 import threads_pb2 as _threads_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Delivery(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DELIVERY_UNSPECIFIED: _ClassVar[Delivery]
    DELIVERY_QUEUE: _ClassVar[Delivery]
    DELIVERY_STEER: _ClassVar[Delivery]

class ThreadChange(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    THREAD_CHANGE_UNSPECIFIED: _ClassVar[ThreadChange]
    THREAD_CHANGE_SNAPSHOT: _ClassVar[ThreadChange]
    THREAD_CHANGE_STATUS: _ClassVar[ThreadChange]
    THREAD_CHANGE_MESSAGES_COMMITTED: _ClassVar[ThreadChange]
    THREAD_CHANGE_MESSAGES_REMOVED: _ClassVar[ThreadChange]
    THREAD_CHANGE_VISIBILITY: _ClassVar[ThreadChange]
    THREAD_CHANGE_METADATA: _ClassVar[ThreadChange]
    THREAD_CHANGE_DELETED: _ClassVar[ThreadChange]
DELIVERY_UNSPECIFIED: Delivery
DELIVERY_QUEUE: Delivery
DELIVERY_STEER: Delivery
THREAD_CHANGE_UNSPECIFIED: ThreadChange
THREAD_CHANGE_SNAPSHOT: ThreadChange
THREAD_CHANGE_STATUS: ThreadChange
THREAD_CHANGE_MESSAGES_COMMITTED: ThreadChange
THREAD_CHANGE_MESSAGES_REMOVED: ThreadChange
THREAD_CHANGE_VISIBILITY: ThreadChange
THREAD_CHANGE_METADATA: ThreadChange
THREAD_CHANGE_DELETED: ThreadChange

class CreateThreadRequest(_message.Message):
    __slots__ = ("agent", "metadata", "request_id")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    agent: str
    metadata: _struct_pb2.Struct
    request_id: str
    def __init__(self, agent: _Optional[str] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class CreateThreadResponse(_message.Message):
    __slots__ = ("thread",)
    THREAD_FIELD_NUMBER: _ClassVar[int]
    thread: _threads_pb2.Thread
    def __init__(self, thread: _Optional[_Union[_threads_pb2.Thread, _Mapping]] = ...) -> None: ...

class GetThreadRequest(_message.Message):
    __slots__ = ("thread_id",)
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    def __init__(self, thread_id: _Optional[str] = ...) -> None: ...

class GetThreadResponse(_message.Message):
    __slots__ = ("thread",)
    THREAD_FIELD_NUMBER: _ClassVar[int]
    thread: _threads_pb2.Thread
    def __init__(self, thread: _Optional[_Union[_threads_pb2.Thread, _Mapping]] = ...) -> None: ...

class ListThreadsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListThreadsResponse(_message.Message):
    __slots__ = ("threads", "next_page_token")
    THREADS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    threads: _containers.RepeatedCompositeFieldContainer[_threads_pb2.Thread]
    next_page_token: str
    def __init__(self, threads: _Optional[_Iterable[_Union[_threads_pb2.Thread, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteThreadRequest(_message.Message):
    __slots__ = ("thread_id", "etag")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    etag: str
    def __init__(self, thread_id: _Optional[str] = ..., etag: _Optional[str] = ...) -> None: ...

class DeleteThreadResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UpdateThreadMetadataRequest(_message.Message):
    __slots__ = ("thread_id", "metadata", "replace", "etag")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    metadata: _struct_pb2.Struct
    replace: bool
    etag: str
    def __init__(self, thread_id: _Optional[str] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., replace: _Optional[bool] = ..., etag: _Optional[str] = ...) -> None: ...

class UpdateThreadMetadataResponse(_message.Message):
    __slots__ = ("thread",)
    THREAD_FIELD_NUMBER: _ClassVar[int]
    thread: _threads_pb2.Thread
    def __init__(self, thread: _Optional[_Union[_threads_pb2.Thread, _Mapping]] = ...) -> None: ...

class ListMessagesRequest(_message.Message):
    __slots__ = ("thread_id", "page_size", "page_token", "order", "after_message_id", "before_message_id")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    AFTER_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    BEFORE_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    page_size: int
    page_token: str
    order: _threads_pb2.SortOrder
    after_message_id: str
    before_message_id: str
    def __init__(self, thread_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., order: _Optional[_Union[_threads_pb2.SortOrder, str]] = ..., after_message_id: _Optional[str] = ..., before_message_id: _Optional[str] = ...) -> None: ...

class ListMessagesResponse(_message.Message):
    __slots__ = ("messages", "next_page_token")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_threads_pb2.Message]
    next_page_token: str
    def __init__(self, messages: _Optional[_Iterable[_Union[_threads_pb2.Message, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class SendRequest(_message.Message):
    __slots__ = ("thread_id", "parts", "metadata", "request_id", "delivery", "run_metadata")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    RUN_METADATA_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    parts: _containers.RepeatedCompositeFieldContainer[_parts_pb2.MessagePart]
    metadata: _struct_pb2.Struct
    request_id: str
    delivery: Delivery
    run_metadata: _struct_pb2.Struct
    def __init__(self, thread_id: _Optional[str] = ..., parts: _Optional[_Iterable[_Union[_parts_pb2.MessagePart, _Mapping]]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., request_id: _Optional[str] = ..., delivery: _Optional[_Union[Delivery, str]] = ..., run_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class SendResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _runs_pb2.RunHandle
    def __init__(self, run: _Optional[_Union[_runs_pb2.RunHandle, _Mapping]] = ...) -> None: ...

class SendAndStreamRequest(_message.Message):
    __slots__ = ("send",)
    SEND_FIELD_NUMBER: _ClassVar[int]
    send: SendRequest
    def __init__(self, send: _Optional[_Union[SendRequest, _Mapping]] = ...) -> None: ...

class SendAndStreamResponse(_message.Message):
    __slots__ = ("run", "event")
    RUN_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    run: _runs_pb2.RunHandle
    event: _runs_pb2.RunEvent
    def __init__(self, run: _Optional[_Union[_runs_pb2.RunHandle, _Mapping]] = ..., event: _Optional[_Union[_runs_pb2.RunEvent, _Mapping]] = ...) -> None: ...

class TriggerRequest(_message.Message):
    __slots__ = ("thread_id", "input", "request_id", "run_metadata")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_METADATA_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    input: _struct_pb2.Value
    request_id: str
    run_metadata: _struct_pb2.Struct
    def __init__(self, thread_id: _Optional[str] = ..., input: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., request_id: _Optional[str] = ..., run_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class TriggerResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _runs_pb2.RunHandle
    def __init__(self, run: _Optional[_Union[_runs_pb2.RunHandle, _Mapping]] = ...) -> None: ...

class RegenerateRequest(_message.Message):
    __slots__ = ("thread_id", "message_id", "request_id", "etag", "run_metadata")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    RUN_METADATA_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    message_id: str
    request_id: str
    etag: str
    run_metadata: _struct_pb2.Struct
    def __init__(self, thread_id: _Optional[str] = ..., message_id: _Optional[str] = ..., request_id: _Optional[str] = ..., etag: _Optional[str] = ..., run_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class RegenerateResponse(_message.Message):
    __slots__ = ("run", "removed_message_ids", "retained_message_ids")
    RUN_FIELD_NUMBER: _ClassVar[int]
    REMOVED_MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    RETAINED_MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    run: _runs_pb2.RunHandle
    removed_message_ids: _containers.RepeatedScalarFieldContainer[str]
    retained_message_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, run: _Optional[_Union[_runs_pb2.RunHandle, _Mapping]] = ..., removed_message_ids: _Optional[_Iterable[str]] = ..., retained_message_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class WatchThreadRequest(_message.Message):
    __slots__ = ("thread_id", "after_version")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_VERSION_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    after_version: int
    def __init__(self, thread_id: _Optional[str] = ..., after_version: _Optional[int] = ...) -> None: ...

class WatchThreadResponse(_message.Message):
    __slots__ = ("thread", "change", "message_ids")
    THREAD_FIELD_NUMBER: _ClassVar[int]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    thread: _threads_pb2.Thread
    change: ThreadChange
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, thread: _Optional[_Union[_threads_pb2.Thread, _Mapping]] = ..., change: _Optional[_Union[ThreadChange, str]] = ..., message_ids: _Optional[_Iterable[str]] = ...) -> None: ...
