"""The Python client of pai-grpc: typed threads, runs and events over gRPC.

Asynchronous first::

    from pai_grpc.client import PaiClient

    async with PaiClient("127.0.0.1:50051", token="...") as client:
        thread = await client.create_thread()
        run = await thread.send("What is the weather in Paris?")
        async for event in run.stream():   # resumes by seq across reconnects
            ...
        print(await run.text())

        # Or send and stream on one call (the first event comes sooner):
        async for event in await thread.send_and_stream("And in Rome?"):
            ...

and blocking for scripts (``PaiClient.sync(...)`` or :class:`SyncPaiClient`).
Objects are the domain types of :mod:`pai_grpc.domain` (``Thread``,
``Message``, parts, ``Run``, ``RunEvent``, ``PendingAction``), never raw
protobuf. Errors are :class:`PaiClientError` subclasses carrying the
server's ``ErrorInfo`` reason, ``BadRequest`` field violations and
``RetryInfo`` delay.
"""

from pai_grpc._wire import check_health
from pai_grpc.client._chat import CLI_RETRY, chat
from pai_grpc.client._client import DEFAULT_TIMEOUT, PaiClient, new_request_id
from pai_grpc.client._errors import (
    AlreadyExistsError,
    ConflictError,
    DeadlineExceededError,
    FailedPreconditionError,
    FieldViolation,
    InvalidArgumentError,
    NotFoundError,
    PaiClientError,
    PermissionDeniedError,
    ProtocolError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
)
from pai_grpc.client._handles import Content, RunHandle, ThreadHandle, message_text
from pai_grpc.client._retry import DEFAULT_RETRY, NO_RETRY, RetryPolicy
from pai_grpc.client._stream import RunStream, ThreadUpdate, is_recovery_abort, is_terminal_event
from pai_grpc.client._sync import SyncPaiClient, SyncRun, SyncRunStream, SyncThread

__all__ = [
    "CLI_RETRY",
    "DEFAULT_RETRY",
    "DEFAULT_TIMEOUT",
    "NO_RETRY",
    "AlreadyExistsError",
    "ConflictError",
    "Content",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "FieldViolation",
    "InvalidArgumentError",
    "NotFoundError",
    "PaiClient",
    "PaiClientError",
    "PermissionDeniedError",
    "ProtocolError",
    "ResourceExhaustedError",
    "RetryPolicy",
    "RunHandle",
    "RunStream",
    "SyncPaiClient",
    "SyncRun",
    "SyncRunStream",
    "SyncThread",
    "ThreadHandle",
    "ThreadUpdate",
    "UnauthenticatedError",
    "UnavailableError",
    "chat",
    "check_health",
    "is_recovery_abort",
    "is_terminal_event",
    "message_text",
    "new_request_id",
]
