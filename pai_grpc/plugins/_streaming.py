"""The streaming phases over the wire: resolve_model_context, around_model_call, transform.

Middleware phases run as bidirectional streams: the plugin asks the runtime
for ``next()`` and answers; in around_model_call a plugin may hand the
provider stream back untouched so its chunks never cross the wire twice. A
stream transform fails open only before its first chunk went downstream (the
chunks it already consumed are replayed).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc

from pai.v1 import chunks_pb2
from pai.v1 import lifecycle_plugin_service_pb2 as pb
from pai_grpc.convert import (
    HookCall,
    chunk_from_proto,
    chunk_to_proto,
    hook_context_to_proto,
    lifecycle_message_to_proto,
    model_call_patch_from_proto,
    model_messages_from_proto,
    model_messages_to_proto,
    model_step_request_to_proto,
    step_abort_from_proto,
)
from pai_grpc.domain import DataChunk, ModelMessage, StepStreamChunk
from pai_grpc.errors import ModelError, PaiError
from pai_grpc.lifecycle import (
    ContextNext,
    ModelCallNext,
    ModelStepRequest,
    ModelStepStreamResult,
    ResolveModelContextInput,
    TransformStepStreamInput,
)
from pai_grpc.lifecycle.internal import apply_patch
from pai_grpc.plugins._calls import (
    UNDECODABLE,
    Downstream,
    parse_reply,
    received,
    send,
    send_end,
    sendable_runtime_context,
    step_id_of,
    write,
)
from pai_grpc.plugins._errors import (
    HookProtocolError,
    HookTimeout,
    PluginFailure,
    classify,
    hook_error,
)
from pai_grpc.plugins._host import ContextNextGrant

if TYPE_CHECKING:
    from pai_grpc.plugins._adapter import RemoteLifecycle

#: Upstream chunks read ahead of the plugin before the runtime waits for it (backpressure).
MAX_OUTBOX = 256


async def resolve_model_context(
    remote: RemoteLifecycle, input: ResolveModelContextInput, next: ContextNext
) -> list[ModelMessage]:
    """The plugin asks for next() / next(base) and answers with the context.

    For a plugin that declared ``prefetch_model_context`` the runtime evaluates
    next() before opening the stream and sends the result with ``start``: the
    plugin's first next() then needs no round trip.
    """
    phase = "resolve_model_context"
    step_id = step_id_of(input)
    if remote.skipping(phase, step_id):
        return await next()
    if remote.unary_model_context:
        return await _resolve_unary(remote, input, next, step_id)
    token = ""
    call = None
    # The memoised result of next() without a base (RMC-02), once evaluated.
    downstream: list[ModelMessage] | None = None
    try:
        remote.backoff.check(phase)
        if remote.prefetch_model_context:
            downstream = await _downstream(next, None)
        token, ctx = remote.hook_context(
            phase, input, thread_id=input.run.thread_id, history=input.history
        )
        call = remote.stub.ResolveModelContext()
        start = _context_start(ctx, input, downstream)
        await write(call, pb.ResolveModelContextRequest(start=start), remote.plugin, phase)
        while True:
            reply = await remote.read_reply(call, phase)
            match reply.WhichOneof("message"):
                case "next":
                    if reply.next.HasField("base"):
                        base = parse_reply(
                            lambda: model_messages_from_proto(reply.next.base.messages),  # noqa: B023 (called at once)
                            remote.plugin,
                            phase,
                        )
                        result = await _downstream(next, base)
                    elif downstream is not None:
                        result = downstream  # prefetched: the same messages (RMC-02)
                    else:
                        result = await _downstream(next, None)
                    await write(
                        call,
                        pb.ResolveModelContextRequest(
                            next_result=pb.ContextNextResult(
                                messages=model_messages_to_proto(result)
                            )
                        ),
                        remote.plugin,
                        phase,
                    )
                case "failed":
                    raise hook_error(
                        reply.failed.reason,
                        reply.failed.message,
                        plugin=remote.plugin,
                        phase=phase,
                    )
                case "result":
                    messages = parse_reply(
                        lambda: model_messages_from_proto(reply.result.messages),  # noqa: B023 (called at once)
                        remote.plugin,
                        phase,
                    )
                    remote.backoff.succeeded()
                    return messages
                case other:
                    raise HookProtocolError(remote.plugin, phase, f"unexpected message {other!r}")
    except Downstream as e:
        raise e.error from None
    except PaiError as failure:
        remote.handle_failure(phase, failure, step_id)
        # Failing open: as if the hook were absent (a prefetched next() is not run twice).
        return list(downstream) if downstream is not None else await next()
    finally:
        if call is not None:
            call.cancel()
        if token:
            remote.host.revoke(token)


def _context_start(
    ctx: Any, input: ResolveModelContextInput, downstream: list[ModelMessage] | None
) -> pb.ResolveModelContextStart:
    """The call's start: its context, the step-start anchor, the prefetched next()."""
    start = pb.ResolveModelContextStart(context=ctx)
    if input.history is not None and input.history.through is not None:
        start.through.CopyFrom(lifecycle_message_to_proto(input.history.through))
    if downstream is not None:
        start.downstream.CopyFrom(
            pb.ContextNextResult(messages=model_messages_to_proto(downstream))
        )
    return start


async def _resolve_unary(
    remote: RemoteLifecycle, input: ResolveModelContextInput, next: ContextNext, step_id: str
) -> list[ModelMessage]:
    """resolve_model_context as one ResolveModelContextUnary call.

    The plugin's next() / next(base) that the request does not answer come
    back through HookHostService.ResolveModelContextNext (the call's
    :class:`ContextNextGrant`), so the hook runs once whatever it asks. The
    failure rules are the stream's: an error of the inner layers is the
    runtime's own, the phase's timeout counts the plugin's time only, and a
    plugin failing open leaves next()'s result (evaluated at most once).
    """
    phase = "resolve_model_context"
    token = ""
    grant: ContextNextGrant | None = None
    try:
        remote.backoff.check(phase)
        downstream = await _downstream(next, None) if remote.prefetch_model_context else None
        grant = ContextNextGrant(next, downstream)
        token, ctx = remote.hook_context(
            phase, input, thread_id=input.run.thread_id, history=input.history, context_next=grant
        )
        start = _context_start(ctx, input, downstream)
        # No gRPC deadline: the grant suspends this timeout while the runtime answers a next().
        call = remote.stub.ResolveModelContextUnary(pb.ResolveModelContextUnaryRequest(start=start))
        grant.call = call
        try:
            async with asyncio.timeout(remote.policy(phase).timeout) as timeout:
                grant.timeout = timeout
                response = await call
        except TimeoutError:
            raise HookTimeout(remote.plugin, phase, "no answer within the timeout") from None
        except grpc.aio.AioRpcError as e:
            if grant.error is not None:
                raise Downstream(grant.error) from None
            raise classify(e, remote.plugin, phase) from None
        except asyncio.CancelledError:
            # The grant cancels the call when the inner layers fail; any other
            # cancellation (the run's) passes through.
            task = asyncio.current_task()
            if grant.error is not None and task is not None and not task.cancelling():
                raise Downstream(grant.error) from None
            raise
        finally:
            grant.timeout = None  # exited: it can no longer be suspended or resumed
        if grant.error is not None:
            raise Downstream(grant.error)
        if response is None:
            # grpc.aio hands back None for bytes that do not parse as the reply.
            raise HookProtocolError(remote.plugin, phase, UNDECODABLE)
        messages = parse_reply(
            lambda: model_messages_from_proto(response.messages), remote.plugin, phase
        )
        remote.backoff.succeeded()
        return messages
    except Downstream as e:
        raise e.error from None
    except PaiError as failure:
        remote.handle_failure(phase, failure, step_id)
        # Failing open: as if the hook were absent (next() is not run twice).
        if grant is not None and grant.downstream is not None:
            return list(grant.downstream)
        return await next()
    finally:
        if token:
            remote.host.revoke(token)
        if grant is not None:
            grant.close()


async def _downstream(next: ContextNext, base: list[ModelMessage] | None) -> list[ModelMessage]:
    """next() / next(base); its error passes through as the runtime's own (``Downstream``)."""
    try:
        return await (next(base) if base is not None else next())
    except Exception as e:
        raise Downstream(e) from e


async def around_model_call(
    remote: RemoteLifecycle, request: ModelStepRequest, next: ModelCallNext
) -> ModelStepStreamResult:
    """The plugin may call next(patch), then pass the stream through or transform it."""
    phase = "around_model_call"
    step_id = f"step-{request.step_index}-{request.run_id}"
    if remote.skipping(phase, step_id):
        return await next()
    # around_model_call's input is the request; the facade is not part of it.
    token = ""
    ctx = hook_context_to_proto(
        HookCall(
            thread_id=request.thread_id,
            runtime_context=sendable_runtime_context(request.runtime_context),
        )
    )
    call = remote.stub.AroundModelCall()
    attempts: list[ModelStepStreamResult] = []
    handed_off = False
    try:
        remote.backoff.check(phase)
        await write(
            call,
            pb.AroundModelCallRequest(
                start=pb.AroundModelCallStart(
                    context=ctx, request=model_step_request_to_proto(request)
                )
            ),
            remote.plugin,
            phase,
        )
        while True:
            reply = await remote.read_reply(call, phase)
            kind = reply.WhichOneof("message")
            if kind == "next":
                patch = None
                if reply.next.HasField("patch"):
                    patch = parse_reply(
                        functools.partial(
                            model_call_patch_from_proto,
                            reply.next.patch,
                            remote.resolver(request.model),
                        ),
                        remote.plugin,
                        phase,
                    )
                try:
                    attempt = await (next(patch) if patch is not None else next())
                except ModelError as e:
                    # A setup failure: the plugin may fall back (AMC-03).
                    await write(
                        call,
                        pb.AroundModelCallRequest(
                            next_failed=pb.ModelCallFailed(reason=e.reason, message=e.message)
                        ),
                        remote.plugin,
                        phase,
                    )
                    continue
                except Exception as e:
                    raise Downstream(e) from e
                attempts.append(attempt)
                effective = apply_patch(request, patch) if patch is not None else request
                await write(
                    call,
                    pb.AroundModelCallRequest(
                        next_started=pb.ModelCallStarted(
                            request=model_step_request_to_proto(effective)
                        )
                    ),
                    remote.plugin,
                    phase,
                )
                if reply.next.mode == pb.STREAM_MODE_TRANSFORM:
                    handed_off = True
                    return ModelStepStreamResult(
                        stream=_duplex(remote, call, attempt.stream, phase, step_id, token)
                    )
            elif kind == "failed":
                raise hook_error(
                    reply.failed.reason, reply.failed.message, plugin=remote.plugin, phase=phase
                )
            elif kind == "pass_through":
                chosen = _chosen_attempt(remote, attempts, reply.pass_through, "pass_through")
                remote.backoff.succeeded()
                # The attempt's own result, untouched: the runtime identifies its
                # source request. The provider stream never crosses the wire.
                return chosen
            elif kind == "subscribe":
                chosen = _chosen_attempt(remote, attempts, reply.subscribe, "subscribe")
                handed_off = True
                return ModelStepStreamResult(
                    stream=_duplex(remote, call, chosen.stream, phase, step_id, token)
                )
            elif kind in ("chunk", "end"):
                # An answer without next (e.g. a cache hit): the plugin's chunks are the step.
                handed_off = True
                return ModelStepStreamResult(
                    stream=_duplex(remote, call, None, phase, step_id, token, first=reply)
                )
            else:
                raise HookProtocolError(remote.plugin, phase, f"unexpected message {kind!r}")
    except Downstream as e:
        raise e.error from None
    except PaiError as failure:
        remote.handle_failure(phase, failure, step_id)
        return attempts[-1] if attempts else await next()
    finally:
        if not handed_off:
            call.cancel()


def _chosen_attempt(
    remote: RemoteLifecycle,
    attempts: list[ModelStepStreamResult],
    message: pb.PassThrough | pb.StreamSubscribe,
    kind: str,
) -> ModelStepStreamResult:
    """The attempt a pass_through / subscribe names (unset: the latest)."""
    if not attempts:
        raise HookProtocolError(remote.plugin, "around_model_call", f"{kind} before next()")
    if not message.HasField("attempt"):
        return attempts[-1]
    index = int(message.attempt)
    if index >= len(attempts):
        raise HookProtocolError(
            remote.plugin, "around_model_call", f"{kind} names unknown attempt {index}"
        )
    return attempts[index]


def transform_step_stream(
    remote: RemoteLifecycle, input: TransformStepStreamInput
) -> AsyncIterator[StepStreamChunk]:
    """Chunks flow to the plugin and back; ui data and abort come back as messages."""
    assert input.stream is not None
    return _transform(remote, input, input.stream)


async def _transform(
    remote: RemoteLifecycle,
    input: TransformStepStreamInput,
    upstream: AsyncIterator[StepStreamChunk],
) -> AsyncIterator[StepStreamChunk]:
    phase = "transform_step_stream"
    step_id = step_id_of(input)
    if remote.skipping(phase, step_id):
        async for chunk in upstream:
            yield chunk
        return
    token, ctx = remote.hook_context(phase, input, thread_id=input.run.thread_id)
    call = remote.stub.TransformStepStream()
    try:
        remote.backoff.check(phase)
        start = pb.TransformStepStreamStart(context=ctx)
        if input.input is not None:
            start.input.CopyFrom(model_step_request_to_proto(input.input))
        await write(call, pb.TransformStepStreamRequest(start=start), remote.plugin, phase)
    except PaiError as failure:
        call.cancel()
        if token:
            remote.host.revoke(token)
        remote.handle_failure(phase, failure, step_id)
        async for chunk in upstream:
            yield chunk
        return

    async def on_reply(reply: Any) -> list[StepStreamChunk]:
        match reply.WhichOneof("message"):
            case "chunk":
                return [parse_reply(lambda: chunk_from_proto(reply.chunk), remote.plugin, phase)]
            case "batch":
                return parse_reply(
                    lambda: [chunk_from_proto(c) for c in reply.batch.chunks],
                    remote.plugin,
                    phase,
                )
            case "ui_data":
                data = parse_reply(
                    lambda: chunk_from_proto(chunks_pb2.StepStreamChunk(data=reply.ui_data)),
                    remote.plugin,
                    phase,
                )
                assert isinstance(data, DataChunk)
                assert input.ui_data is not None
                try:
                    input.ui_data.write(data)
                except Exception as e:
                    raise Downstream(e) from e
                return []
            case "failed":
                raise hook_error(
                    reply.failed.reason, reply.failed.message, plugin=remote.plugin, phase=phase
                )
            case "abort":
                abort = parse_reply(
                    lambda: step_abort_from_proto(reply.abort), remote.plugin, phase
                )
                assert input.abort is not None
                try:
                    await input.abort(abort)
                except Exception as e:
                    raise Downstream(e) from e
                return []
            case other:
                raise HookProtocolError(remote.plugin, phase, f"unexpected message {other!r}")

    async for chunk in _exchange(
            remote,
        call, upstream, phase, step_id, token, chunk_type=pb.TransformStepStreamRequest,
        on_reply=on_reply, batches=remote.accepts_batches,
    ):  # fmt: skip
        yield chunk


def _duplex(
    remote: RemoteLifecycle,
    call: Any,
    upstream: AsyncIterator[StepStreamChunk] | None,
    phase: str,
    step_id: str,
    token: str,
    *,
    first: Any = None,
) -> AsyncIterator[StepStreamChunk]:
    """around_model_call in transform mode: downstream chunks out, result chunks back."""

    async def on_reply(reply: Any) -> list[StepStreamChunk]:
        if reply.WhichOneof("message") == "chunk":
            return [parse_reply(lambda: chunk_from_proto(reply.chunk), remote.plugin, phase)]
        if reply.WhichOneof("message") == "failed":
            raise hook_error(
                reply.failed.reason, reply.failed.message, plugin=remote.plugin, phase=phase
            )
        raise HookProtocolError(
            remote.plugin, phase, f"unexpected message {reply.WhichOneof('message')!r}"
        )

    return _exchange(
        remote,
        call,
        upstream,
        phase,
        step_id,
        token,
        chunk_type=pb.AroundModelCallRequest,
        on_reply=on_reply,
        first=first,
    )


class _ReadAhead:
    """Reads the upstream ahead of the plugin, in a task of its own.

    Chunks that are ready at once (a provider's burst, a zero-latency model)
    are read without returning to the event loop, so everything ready together
    is written as one message to a plugin that accepts batches; a task and a
    wait per chunk cost more than the chunk's own conversion. Reading pauses
    with ``MAX_OUTBOX`` chunks unwritten (backpressure), while the plugin no
    longer reads, and for good after ``stop()``.
    """

    def __init__(self, upstream: AsyncIterator[StepStreamChunk]) -> None:
        self._upstream = upstream
        #: Read, not yet written.
        self.outbox: list[StepStreamChunk] = []
        #: Read, not yet answered downstream (kept to fail open) while ``keep``.
        self.replay: list[StepStreamChunk] = []
        self.keep = True
        #: The upstream ended.
        self.ended = False
        #: What the upstream raised.
        self.error: Exception | None = None
        #: The plugin stopped reading (a write failed): read no further.
        self.paused = False
        self._stopping = False
        self._room = asyncio.Event()
        self._room.set()
        self._changed: asyncio.Future[None] | None = None
        self._task = asyncio.ensure_future(self._run())

    @property
    def finished(self) -> bool:
        """No more chunks will be read (the upstream ended or raised, or reading stopped)."""
        return self._task.done()

    def changed(self) -> asyncio.Future[None]:
        """Resolves at the next chunk read, or when reading finishes."""
        if self._changed is None or self._changed.done():
            self._changed = asyncio.get_running_loop().create_future()
            if self._task.done():
                self._changed.set_result(None)
        return self._changed

    def take(self, batch: bool) -> list[StepStreamChunk]:
        """The unwritten chunks to write next: all of them, or the first one."""
        if batch:
            taken, self.outbox = self.outbox, []
        else:
            taken = [self.outbox.pop(0)]
        self._room.set()
        return taken

    def pause(self) -> None:
        """The plugin stopped reading: read no further."""
        self.paused = True

    def stop(self) -> None:
        """Finish the read in flight, if any, and read no more."""
        self._stopping = True
        self._room.set()

    async def cancel(self) -> None:
        """Cancel the read in flight (so the provider stream can close)."""
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task

    async def finish(self) -> None:
        """Wait until reading finishes (after ``stop()``: the read in flight completes)."""
        await asyncio.wait({self._task})

    async def _run(self) -> None:
        try:
            while True:
                while self._stopping or self.paused or len(self.outbox) >= MAX_OUTBOX:
                    if self._stopping:
                        return
                    self._room.clear()
                    await self._room.wait()
                chunk = await anext(self._upstream)
                if self.keep:
                    self.replay.append(chunk)
                self.outbox.append(chunk)
                self._notify()
        except StopAsyncIteration:
            self.ended = True
        except Exception as e:
            self.error = e
        finally:
            self._notify()

    def _notify(self) -> None:
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)


async def _exchange(
    remote: RemoteLifecycle,
    call: Any,
    upstream: AsyncIterator[StepStreamChunk] | None,
    phase: str,
    step_id: str,
    token: str,
    *,
    chunk_type: Any,
    on_reply: Callable[[Any], Awaitable[list[StepStreamChunk]]],
    first: Any = None,
    batches: bool = False,
) -> AsyncIterator[StepStreamChunk]:
    """Pump ``upstream`` to the plugin while yielding what it sends back.

    The upstream is read ahead in its own task, and writes are pipelined:
    what was read while a write was in flight, or ready at once, goes out
    together (as one ChunkBatch to plugins that accept them). Until the first
    chunk goes downstream, consumed upstream chunks are kept so failing open
    can replay them; after that a failure is fatal. The timeout applies while
    the plugin owes an answer (the upstream has ended and everything was
    written).
    """
    timeout = remote.policy(phase).timeout
    ahead = _ReadAhead(upstream) if upstream is not None else None
    emitted = False
    end_sent = upstream is None
    writable = True
    writing: asyncio.Future[bool] | None = None
    read: asyncio.Future[Any] | None = None
    pending_first = first
    failure: PaiError | None = None
    if upstream is None:
        with contextlib.suppress(Exception):
            await call.done_writing()
    try:
        while True:
            if pending_first is not None:
                reply, pending_first = pending_first, None
            else:
                if ahead is not None and ahead.error is not None:
                    raise Downstream(ahead.error)
                if writing is None and writable and ahead is not None:
                    if ahead.outbox:
                        taken = ahead.take(batches)
                        if len(taken) > 1:
                            message = chunk_type(
                                batch=pb.ChunkBatch(chunks=[chunk_to_proto(c) for c in taken])
                            )
                        else:
                            message = chunk_type(chunk=chunk_to_proto(taken[0]))
                        writing = asyncio.ensure_future(send(call, message))
                    elif ahead.ended and not end_sent:
                        end_sent = True
                        writing = asyncio.ensure_future(send_end(call, chunk_type))
                if read is None:
                    read = asyncio.ensure_future(call.read())
                waits: set[asyncio.Future[Any]] = {read}
                if writing is not None:
                    waits.add(writing)
                reading = ahead is not None and not ahead.finished and writable
                if reading and writing is None:
                    assert ahead is not None
                    waits.add(ahead.changed())
                owed = not reading and writing is None and not (ahead and ahead.outbox)
                done, _ = await asyncio.wait(
                    waits,
                    timeout=timeout if owed else None,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if not done:
                    raise HookTimeout(remote.plugin, phase, "no answer within the timeout")
                if writing is not None and writing in done:
                    # A failed write: the plugin stopped reading (it answered or
                    # failed); its reply, read next, says which.
                    writable = writing.result()
                    writing = None
                    if not writable and ahead is not None:
                        ahead.pause()
                if read not in done:
                    continue
                try:
                    reply = read.result()
                except grpc.aio.AioRpcError as e:
                    raise classify(e, remote.plugin, phase, stream=True) from None
                finally:
                    read = None
                reply = received(reply, remote.plugin, phase)
            kind = reply.WhichOneof("message")
            if kind == "end":
                remote.backoff.succeeded()
                return
            if kind in ("abort", "failed"):
                # A terminal answer: half-close (nothing more is written), so the
                # plugin can end the call without racing our writes.
                with contextlib.suppress(Exception):
                    await call.done_writing()
            for out in await on_reply(reply):
                if not emitted and ahead is not None:
                    ahead.keep = False
                    ahead.replay.clear()
                emitted = True
                yield out
    except Downstream as e:
        raise e.error from None
    except PaiError as e:
        if emitted or not isinstance(e, PluginFailure):
            if isinstance(e, PluginFailure):
                remote.backoff.failed()
            raise
        failure = e
    finally:
        for pending in (read, writing):
            if pending is not None:
                pending.cancel()
        call.cancel()
        if token:
            remote.host.revoke(token)
        if ahead is not None:
            if failure is None:
                # Stop the upstream read in flight, so the provider stream can close.
                await ahead.cancel()
            else:
                ahead.stop()
    # Failing open before anything went downstream: replay what the plugin consumed.
    assert failure is not None
    remote.handle_failure(phase, failure, step_id)
    if ahead is None:
        return
    replayed = 0
    while True:
        while replayed < len(ahead.replay):
            yield ahead.replay[replayed]
            replayed += 1
        if ahead.finished:
            break
        await ahead.finish()  # the read in flight when the plugin failed
    if ahead.error is not None:
        raise ahead.error
    if ahead.ended:
        return
    assert upstream is not None
    async for chunk in upstream:
        yield chunk
