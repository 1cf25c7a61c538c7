from google.protobuf import struct_pb2 as _struct_pb2
from pai.v1 import model_pb2 as _model_pb2
from pai.v1 import parts_pb2 as _parts_pb2
from pai.v1 import threads_pb2 as _threads_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MetadataTarget(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    METADATA_TARGET_UNSPECIFIED: _ClassVar[MetadataTarget]
    METADATA_TARGET_THREAD: _ClassVar[MetadataTarget]
    METADATA_TARGET_THREAD_PRIVATE: _ClassVar[MetadataTarget]
    METADATA_TARGET_RUN: _ClassVar[MetadataTarget]
    METADATA_TARGET_RUN_PRIVATE: _ClassVar[MetadataTarget]
METADATA_TARGET_UNSPECIFIED: MetadataTarget
METADATA_TARGET_THREAD: MetadataTarget
METADATA_TARGET_THREAD_PRIVATE: MetadataTarget
METADATA_TARGET_RUN: MetadataTarget
METADATA_TARGET_RUN_PRIVATE: MetadataTarget

class ListThreadMessagesRequest(_message.Message):
    __slots__ = ("capability_token", "thread_id", "view", "order", "before_message_id", "after_message_id", "page_size", "page_token")
    CAPABILITY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    BEFORE_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    capability_token: str
    thread_id: str
    view: _threads_pb2.MessageView
    order: _threads_pb2.SortOrder
    before_message_id: str
    after_message_id: str
    page_size: int
    page_token: str
    def __init__(self, capability_token: _Optional[str] = ..., thread_id: _Optional[str] = ..., view: _Optional[_Union[_threads_pb2.MessageView, str]] = ..., order: _Optional[_Union[_threads_pb2.SortOrder, str]] = ..., before_message_id: _Optional[str] = ..., after_message_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListThreadMessagesResponse(_message.Message):
    __slots__ = ("messages", "next_page_token")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_threads_pb2.LifecycleMessage]
    next_page_token: str
    def __init__(self, messages: _Optional[_Iterable[_Union[_threads_pb2.LifecycleMessage, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetThreadMessageRequest(_message.Message):
    __slots__ = ("capability_token", "thread_id", "message_id")
    CAPABILITY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    capability_token: str
    thread_id: str
    message_id: str
    def __init__(self, capability_token: _Optional[str] = ..., thread_id: _Optional[str] = ..., message_id: _Optional[str] = ...) -> None: ...

class GetThreadMessageResponse(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: _threads_pb2.LifecycleMessage
    def __init__(self, message: _Optional[_Union[_threads_pb2.LifecycleMessage, _Mapping]] = ...) -> None: ...

class BatchGetThreadMessagesRequest(_message.Message):
    __slots__ = ("capability_token", "thread_id", "message_ids")
    CAPABILITY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    capability_token: str
    thread_id: str
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, capability_token: _Optional[str] = ..., thread_id: _Optional[str] = ..., message_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class BatchGetThreadMessagesResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_threads_pb2.LifecycleMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[_threads_pb2.LifecycleMessage, _Mapping]]] = ...) -> None: ...

class AppendMessage(_message.Message):
    __slots__ = ("role", "parts", "transcript", "context", "metadata", "private_metadata")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPT_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    PRIVATE_METADATA_FIELD_NUMBER: _ClassVar[int]
    role: _threads_pb2.MessageRole
    parts: _containers.RepeatedCompositeFieldContainer[_parts_pb2.MessagePart]
    transcript: bool
    context: bool
    metadata: _struct_pb2.Struct
    private_metadata: _struct_pb2.Struct
    def __init__(self, role: _Optional[_Union[_threads_pb2.MessageRole, str]] = ..., parts: _Optional[_Iterable[_Union[_parts_pb2.MessagePart, _Mapping]]] = ..., transcript: _Optional[bool] = ..., context: _Optional[bool] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., private_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class AppendThreadMessageRequest(_message.Message):
    __slots__ = ("capability_token", "thread_id", "message")
    CAPABILITY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    capability_token: str
    thread_id: str
    message: AppendMessage
    def __init__(self, capability_token: _Optional[str] = ..., thread_id: _Optional[str] = ..., message: _Optional[_Union[AppendMessage, _Mapping]] = ...) -> None: ...

class AppendThreadMessageResponse(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: _threads_pb2.LifecycleMessage
    def __init__(self, message: _Optional[_Union[_threads_pb2.LifecycleMessage, _Mapping]] = ...) -> None: ...

class VisibilityUpdate(_message.Message):
    __slots__ = ("message_ids", "transcript", "context")
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPT_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    transcript: bool
    context: bool
    def __init__(self, message_ids: _Optional[_Iterable[str]] = ..., transcript: _Optional[bool] = ..., context: _Optional[bool] = ...) -> None: ...

class UpdateThreadMessageVisibilityRequest(_message.Message):
    __slots__ = ("capability_token", "thread_id", "update")
    CAPABILITY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    UPDATE_FIELD_NUMBER: _ClassVar[int]
    capability_token: str
    thread_id: str
    update: VisibilityUpdate
    def __init__(self, capability_token: _Optional[str] = ..., thread_id: _Optional[str] = ..., update: _Optional[_Union[VisibilityUpdate, _Mapping]] = ...) -> None: ...

class UpdateThreadMessageVisibilityResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetMetadataRequest(_message.Message):
    __slots__ = ("capability_token", "thread_id", "target")
    CAPABILITY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    capability_token: str
    thread_id: str
    target: MetadataTarget
    def __init__(self, capability_token: _Optional[str] = ..., thread_id: _Optional[str] = ..., target: _Optional[_Union[MetadataTarget, str]] = ...) -> None: ...

class GetMetadataResponse(_message.Message):
    __slots__ = ("metadata",)
    METADATA_FIELD_NUMBER: _ClassVar[int]
    metadata: _struct_pb2.Struct
    def __init__(self, metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class MergeMetadataRequest(_message.Message):
    __slots__ = ("capability_token", "thread_id", "target", "patch")
    CAPABILITY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    PATCH_FIELD_NUMBER: _ClassVar[int]
    capability_token: str
    thread_id: str
    target: MetadataTarget
    patch: _struct_pb2.Struct
    def __init__(self, capability_token: _Optional[str] = ..., thread_id: _Optional[str] = ..., target: _Optional[_Union[MetadataTarget, str]] = ..., patch: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class MergeMetadataResponse(_message.Message):
    __slots__ = ("metadata",)
    METADATA_FIELD_NUMBER: _ClassVar[int]
    metadata: _struct_pb2.Struct
    def __init__(self, metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ReplaceMetadataRequest(_message.Message):
    __slots__ = ("capability_token", "thread_id", "target", "metadata")
    CAPABILITY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    capability_token: str
    thread_id: str
    target: MetadataTarget
    metadata: _struct_pb2.Struct
    def __init__(self, capability_token: _Optional[str] = ..., thread_id: _Optional[str] = ..., target: _Optional[_Union[MetadataTarget, str]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ReplaceMetadataResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ContextQuery(_message.Message):
    __slots__ = ("before_message_id", "after_message_id", "page_size", "page_token")
    BEFORE_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    before_message_id: str
    after_message_id: str
    page_size: int
    page_token: str
    def __init__(self, before_message_id: _Optional[str] = ..., after_message_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class GetCurrentContextRequest(_message.Message):
    __slots__ = ("capability_token", "thread_id", "query")
    CAPABILITY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    capability_token: str
    thread_id: str
    query: ContextQuery
    def __init__(self, capability_token: _Optional[str] = ..., thread_id: _Optional[str] = ..., query: _Optional[_Union[ContextQuery, _Mapping]] = ...) -> None: ...

class GetCurrentContextResponse(_message.Message):
    __slots__ = ("messages", "model_messages", "next_page_token")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MODEL_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_threads_pb2.LifecycleMessage]
    model_messages: _containers.RepeatedCompositeFieldContainer[_model_pb2.ModelMessage]
    next_page_token: str
    def __init__(self, messages: _Optional[_Iterable[_Union[_threads_pb2.LifecycleMessage, _Mapping]]] = ..., model_messages: _Optional[_Iterable[_Union[_model_pb2.ModelMessage, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListContextMessagesRequest(_message.Message):
    __slots__ = ("capability_token", "thread_id", "query")
    CAPABILITY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    capability_token: str
    thread_id: str
    query: ContextQuery
    def __init__(self, capability_token: _Optional[str] = ..., thread_id: _Optional[str] = ..., query: _Optional[_Union[ContextQuery, _Mapping]] = ...) -> None: ...

class ListContextMessagesResponse(_message.Message):
    __slots__ = ("messages", "next_page_token")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_threads_pb2.LifecycleMessage]
    next_page_token: str
    def __init__(self, messages: _Optional[_Iterable[_Union[_threads_pb2.LifecycleMessage, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class HistoryQuery(_message.Message):
    __slots__ = ("view", "order", "after_message_id")
    VIEW_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    AFTER_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    view: _threads_pb2.MessageView
    order: _threads_pb2.SortOrder
    after_message_id: str
    def __init__(self, view: _Optional[_Union[_threads_pb2.MessageView, str]] = ..., order: _Optional[_Union[_threads_pb2.SortOrder, str]] = ..., after_message_id: _Optional[str] = ...) -> None: ...

class CollectHistoryRequest(_message.Message):
    __slots__ = ("capability_token", "thread_id", "query")
    CAPABILITY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    capability_token: str
    thread_id: str
    query: HistoryQuery
    def __init__(self, capability_token: _Optional[str] = ..., thread_id: _Optional[str] = ..., query: _Optional[_Union[HistoryQuery, _Mapping]] = ...) -> None: ...

class CollectHistoryResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_threads_pb2.LifecycleMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[_threads_pb2.LifecycleMessage, _Mapping]]] = ...) -> None: ...

class ListHistoryBeforeRequest(_message.Message):
    __slots__ = ("capability_token", "thread_id", "query", "page_size", "page_token")
    CAPABILITY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    capability_token: str
    thread_id: str
    query: HistoryQuery
    page_size: int
    page_token: str
    def __init__(self, capability_token: _Optional[str] = ..., thread_id: _Optional[str] = ..., query: _Optional[_Union[HistoryQuery, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListHistoryBeforeResponse(_message.Message):
    __slots__ = ("messages", "next_page_token")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_threads_pb2.LifecycleMessage]
    next_page_token: str
    def __init__(self, messages: _Optional[_Iterable[_Union[_threads_pb2.LifecycleMessage, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetHistoryModelMessagesRequest(_message.Message):
    __slots__ = ("capability_token", "thread_id", "query")
    CAPABILITY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    capability_token: str
    thread_id: str
    query: HistoryQuery
    def __init__(self, capability_token: _Optional[str] = ..., thread_id: _Optional[str] = ..., query: _Optional[_Union[HistoryQuery, _Mapping]] = ...) -> None: ...

class GetHistoryModelMessagesResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_model_pb2.ModelMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[_model_pb2.ModelMessage, _Mapping]]] = ...) -> None: ...

class MutationOperation(_message.Message):
    __slots__ = ("append_message", "update_visibility", "merge_metadata", "replace_metadata")
    class MetadataMerge(_message.Message):
        __slots__ = ("target", "patch")
        TARGET_FIELD_NUMBER: _ClassVar[int]
        PATCH_FIELD_NUMBER: _ClassVar[int]
        target: MetadataTarget
        patch: _struct_pb2.Struct
        def __init__(self, target: _Optional[_Union[MetadataTarget, str]] = ..., patch: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...
    class MetadataReplace(_message.Message):
        __slots__ = ("target", "metadata")
        TARGET_FIELD_NUMBER: _ClassVar[int]
        METADATA_FIELD_NUMBER: _ClassVar[int]
        target: MetadataTarget
        metadata: _struct_pb2.Struct
        def __init__(self, target: _Optional[_Union[MetadataTarget, str]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...
    APPEND_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    UPDATE_VISIBILITY_FIELD_NUMBER: _ClassVar[int]
    MERGE_METADATA_FIELD_NUMBER: _ClassVar[int]
    REPLACE_METADATA_FIELD_NUMBER: _ClassVar[int]
    append_message: AppendMessage
    update_visibility: VisibilityUpdate
    merge_metadata: MutationOperation.MetadataMerge
    replace_metadata: MutationOperation.MetadataReplace
    def __init__(self, append_message: _Optional[_Union[AppendMessage, _Mapping]] = ..., update_visibility: _Optional[_Union[VisibilityUpdate, _Mapping]] = ..., merge_metadata: _Optional[_Union[MutationOperation.MetadataMerge, _Mapping]] = ..., replace_metadata: _Optional[_Union[MutationOperation.MetadataReplace, _Mapping]] = ...) -> None: ...

class MutateRequest(_message.Message):
    __slots__ = ("capability_token", "thread_id", "operations", "expected_version", "expected_private_metadata")
    CAPABILITY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_PRIVATE_METADATA_FIELD_NUMBER: _ClassVar[int]
    capability_token: str
    thread_id: str
    operations: _containers.RepeatedCompositeFieldContainer[MutationOperation]
    expected_version: int
    expected_private_metadata: _struct_pb2.Struct
    def __init__(self, capability_token: _Optional[str] = ..., thread_id: _Optional[str] = ..., operations: _Optional[_Iterable[_Union[MutationOperation, _Mapping]]] = ..., expected_version: _Optional[int] = ..., expected_private_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class MutateResponse(_message.Message):
    __slots__ = ("messages", "version")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_threads_pb2.LifecycleMessage]
    version: int
    def __init__(self, messages: _Optional[_Iterable[_Union[_threads_pb2.LifecycleMessage, _Mapping]]] = ..., version: _Optional[int] = ...) -> None: ...

class ResolveModelContextNextRequest(_message.Message):
    __slots__ = ("capability_token", "thread_id", "base")
    CAPABILITY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    BASE_FIELD_NUMBER: _ClassVar[int]
    capability_token: str
    thread_id: str
    base: _model_pb2.ModelMessageList
    def __init__(self, capability_token: _Optional[str] = ..., thread_id: _Optional[str] = ..., base: _Optional[_Union[_model_pb2.ModelMessageList, _Mapping]] = ...) -> None: ...

class ResolveModelContextNextResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_model_pb2.ModelMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[_model_pb2.ModelMessage, _Mapping]]] = ...) -> None: ...
