"""Small built-in lifecycles: a recent window, secret redaction, model fallback, a quota.

Each is usable from Python and from config (``[[agents.<name>.lifecycle]]``).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime
from typing import Any

from pai_grpc.domain import (
    ErrorChunk,
    JsonObject,
    ModelMessage,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    StepStreamChunk,
    TextDeltaChunk,
    TextEndChunk,
    ToolModelMessage,
)
from pai_grpc.errors import ModelError
from pai_grpc.lifecycle._decisions import AssistantResponse, Respond
from pai_grpc.lifecycle._errors import VersionConflict
from pai_grpc.lifecycle._inputs import (
    ContextNext,
    ModelCallNext,
    ModelStepStreamResult,
    PrepareRunInput,
    ResolveModelContextInput,
    TransformStepStreamInput,
)
from pai_grpc.lifecycle._lifecycle import AgentLifecycle
from pai_grpc.lifecycle._patches import ModelCallPatch, ModelStepRequest
from pai_grpc.lifecycle._protocols import TransactionFacade
from pai_grpc.models import LanguageModel


class RecentWindow(AgentLifecycle):
    """Keep only the newest ``messages`` model messages of the context.

    The window never starts with orphaned tool results (a tool message whose
    call was cut off), which providers reject.
    """

    def __init__(self, messages: int = 20, *, name: str = "recent_window") -> None:
        if messages < 1:
            raise ValueError("the window must keep at least one message")
        self.messages = messages
        self.name = name

    def phases(self) -> frozenset[str]:
        """resolve_model_context."""
        return frozenset({"resolve_model_context"})

    async def resolve_model_context(
        self, input: ResolveModelContextInput, next: ContextNext
    ) -> list[ModelMessage]:
        """The newest messages of whatever the inner layers resolve."""
        context = await next()
        window = context[-self.messages :]
        while window and isinstance(window[0], ToolModelMessage):
            window = window[1:]
        return window


#: Common credential shapes (API keys, cloud keys, tokens, private keys).
DEFAULT_SECRET_PATTERNS = (
    r"sk-(?:ant-)?[A-Za-z0-9_\-]{16,}",
    r"AKIA[0-9A-Z]{16}",
    r"gh[pousr]_[A-Za-z0-9]{36,}",
    r"xox[abprs]-[A-Za-z0-9\-]{10,}",
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
)


class RedactSecrets(AgentLifecycle):
    """Redact secrets from text and reasoning as a canonical transform.

    What streams, what is stored and what later steps see are all redacted
    (TSS-01). Text is released up to its last whitespace, so a secret (which
    contains none) is never split across releases, and streaming stays live.
    """

    def __init__(
        self,
        patterns: Iterable[str] = DEFAULT_SECRET_PATTERNS,
        *,
        replacement: str = "[REDACTED]",
        name: str = "redact_secrets",
    ) -> None:
        self.pattern = re.compile("|".join(f"(?:{p})" for p in patterns))
        self.replacement = replacement
        self.name = name

    def phases(self) -> frozenset[str]:
        """transform_step_stream."""
        return frozenset({"transform_step_stream"})

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced."""
        return self.pattern.sub(self.replacement, text)

    def transform_step_stream(
        self, input: TransformStepStreamInput
    ) -> AsyncIterator[StepStreamChunk]:
        """Hold each block's text back to its last whitespace; release it redacted."""
        assert input.stream is not None
        return self._transform(input.stream)

    async def _transform(
        self, stream: AsyncIterator[StepStreamChunk]
    ) -> AsyncIterator[StepStreamChunk]:
        held: dict[tuple[str, str], str] = {}
        async for chunk in stream:
            match chunk:
                case TextDeltaChunk() | ReasoningDeltaChunk():
                    key = (chunk.type, chunk.id)
                    buffer = held.get(key, "") + chunk.text
                    cut = max(buffer.rfind(" "), buffer.rfind("\n"), buffer.rfind("\t"))
                    if cut < 0:
                        held[key] = buffer
                        continue
                    held[key] = buffer[cut + 1 :]
                    yield chunk.model_copy(update={"text": self.redact(buffer[: cut + 1])})
                case TextEndChunk() | ReasoningEndChunk():
                    delta = "text-delta" if chunk.type == "text-end" else "reasoning-delta"
                    rest = held.pop((delta, chunk.id), "")
                    if rest:
                        cls = TextDeltaChunk if delta == "text-delta" else ReasoningDeltaChunk
                        yield cls(id=chunk.id, text=self.redact(rest))
                    yield chunk
                case _:
                    yield chunk


class ModelFallback(AgentLifecycle):
    """Call ``fallback`` when the primary model fails before producing output.

    Setup failures (``next()`` raising) and an error as the very first chunk
    are retried once on the fallback route; errors after output has started
    pass through, since emitted chunks cannot be unsent. The fallback
    attempt's result is returned unchanged, so transform_step_stream and
    after_step see the fallback route as the step's effective request.
    """

    def __init__(
        self,
        fallback: LanguageModel,
        *,
        reasons: Iterable[str] | None = None,
        name: str = "model_fallback",
    ) -> None:
        self.fallback = fallback
        self.reasons = frozenset(reasons) if reasons is not None else None
        self.name = name
        #: How many calls went to the fallback (for logs and tests).
        self.fallbacks = 0

    def phases(self) -> frozenset[str]:
        """around_model_call."""
        return frozenset({"around_model_call"})

    def _applies(self, reason: str) -> bool:
        return self.reasons is None or reason in self.reasons

    async def around_model_call(
        self, request: ModelStepRequest, next: ModelCallNext
    ) -> ModelStepStreamResult:
        """Try the primary; fall back on setup failure or an immediate error."""
        try:
            result = await next()
        except ModelError as e:
            if not self._applies(e.reason):
                raise
            return await self._fallback(next)
        stream = result.stream
        try:
            first = await anext(stream)
        except StopAsyncIteration:
            return ModelStepStreamResult(stream=_chain([], stream))
        except ModelError as e:
            if not self._applies(e.reason):
                raise
            return await self._fallback(next)
        if isinstance(first, ErrorChunk) and self._applies(first.reason):
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
            return await self._fallback(next)
        return ModelStepStreamResult(stream=_chain([first], stream))

    async def _fallback(self, next: ModelCallNext) -> ModelStepStreamResult:
        self.fallbacks += 1
        return await next(ModelCallPatch(model=self.fallback))


async def _chain(
    first: list[StepStreamChunk], rest: AsyncIterator[StepStreamChunk]
) -> AsyncIterator[StepStreamChunk]:
    for chunk in first:
        yield chunk
    async for chunk in rest:
        yield chunk


class Quota(AgentLifecycle):
    """A per-thread run quota as a prepare_run guardrail.

    Counts runs in the thread's private metadata (a private-only write: no
    client-visible event) and answers with a blocked response once the quota
    is used up. With ``window_seconds`` the count resets after the window.
    """

    def __init__(
        self,
        max_runs: int,
        *,
        window_seconds: float | None = None,
        message: str = "This conversation has reached its usage limit.",
        key: str = "quota",
        name: str = "quota",
    ) -> None:
        if max_runs < 1:
            raise ValueError("max_runs must be at least 1")
        self.max_runs = max_runs
        self.window_seconds = window_seconds
        self.message = message
        self.key = key
        self.name = name

    def phases(self) -> frozenset[str]:
        """prepare_run."""
        return frozenset({"prepare_run"})

    async def prepare_run(self, input: PrepareRunInput) -> Respond | None:
        """Count this episode's run, or block it when the quota is used up."""
        if input.run.execution.operation == "resume":
            return None  # a resumed run was already counted
        for _ in range(20):
            private = await input.thread.private_metadata.get()
            state: dict[str, Any] = dict(private.get(self.key) or {})
            now = datetime.now(UTC).timestamp()
            started = float(state.get("window_start") or now)
            used = int(state.get("runs") or 0)
            if self.window_seconds is not None and now - started >= self.window_seconds:
                started, used = now, 0
            if used >= self.max_runs:
                return Respond(
                    AssistantResponse.text(self.message), outcome="blocked", reason="QUOTA_EXCEEDED"
                )
            update = {self.key: {"runs": used + 1, "window_start": started}}

            async def stage(tx: TransactionFacade, update: JsonObject = update) -> None:
                await tx.private_metadata.merge(update)

            try:
                await input.thread.mutate(stage, expected_private_metadata=private)
            except VersionConflict:
                continue  # a concurrent run counted first: count again
            return None
        return None
