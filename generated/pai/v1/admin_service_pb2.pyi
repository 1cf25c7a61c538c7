from google.protobuf import struct_pb2 as _struct_pb2
from pai.v1 import runs_pb2 as _runs_pb2
from pai.v1 import threads_pb2 as _threads_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class UpdateMessageVisibilityRequest(_message.Message):
    __slots__ = ("thread_id", "message_ids", "transcript", "context", "etag")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPT_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    transcript: bool
    context: bool
    etag: str
    def __init__(self, thread_id: _Optional[str] = ..., message_ids: _Optional[_Iterable[str]] = ..., transcript: _Optional[bool] = ..., context: _Optional[bool] = ..., etag: _Optional[str] = ...) -> None: ...

class UpdateMessageVisibilityResponse(_message.Message):
    __slots__ = ("thread",)
    THREAD_FIELD_NUMBER: _ClassVar[int]
    thread: _threads_pb2.Thread
    def __init__(self, thread: _Optional[_Union[_threads_pb2.Thread, _Mapping]] = ...) -> None: ...

class GetThreadPrivateMetadataRequest(_message.Message):
    __slots__ = ("thread_id",)
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    def __init__(self, thread_id: _Optional[str] = ...) -> None: ...

class GetThreadPrivateMetadataResponse(_message.Message):
    __slots__ = ("private_metadata", "version")
    PRIVATE_METADATA_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    private_metadata: _struct_pb2.Struct
    version: int
    def __init__(self, private_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., version: _Optional[int] = ...) -> None: ...

class GetRunPrivateMetadataRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class GetRunPrivateMetadataResponse(_message.Message):
    __slots__ = ("private_metadata",)
    PRIVATE_METADATA_FIELD_NUMBER: _ClassVar[int]
    private_metadata: _struct_pb2.Struct
    def __init__(self, private_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class UpdateRunMetadataRequest(_message.Message):
    __slots__ = ("run_id", "metadata", "private_metadata")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    PRIVATE_METADATA_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    metadata: _struct_pb2.Struct
    private_metadata: _struct_pb2.Struct
    def __init__(self, run_id: _Optional[str] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., private_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class UpdateRunMetadataResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _runs_pb2.Run
    def __init__(self, run: _Optional[_Union[_runs_pb2.Run, _Mapping]] = ...) -> None: ...

class ListLifecycleMessagesRequest(_message.Message):
    __slots__ = ("thread_id", "view", "order", "page_size", "page_token")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    view: _threads_pb2.MessageView
    order: _threads_pb2.SortOrder
    page_size: int
    page_token: str
    def __init__(self, thread_id: _Optional[str] = ..., view: _Optional[_Union[_threads_pb2.MessageView, str]] = ..., order: _Optional[_Union[_threads_pb2.SortOrder, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListLifecycleMessagesResponse(_message.Message):
    __slots__ = ("messages", "next_page_token")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_threads_pb2.LifecycleMessage]
    next_page_token: str
    def __init__(self, messages: _Optional[_Iterable[_Union[_threads_pb2.LifecycleMessage, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
