"""The built-in context compactor: a cursor-backed summary of older context (CMP-01..03).

It decides and commits compaction from the durable physical base (the
step's history, capped at its anchor), then calls ``next(base)`` exactly
once, so inner resolvers (windows, redactors, retrieval) see the new summary
on the same step. Its state lives in the thread's private metadata::

    {"boundaries": [{"through_message_id": ..., "summary": ...}, ...],
     "usage_anchor": {"through_message_id": ..., "input_tokens": ...} | null}

The boundary stack is cleared and the usage anchor invalidated whenever
context eligibility changes (a regeneration, or a visibility rewrite that
touches context), from prepare_history_rewrite in the rewrite's own write.
A summary commits with ``mutate(expected_private_metadata=...)`` under the
run's lease, so an in-flight summary never lands on obsolete state.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from pai_grpc.domain import (
    AssistantModelMessage,
    JsonObject,
    LifecycleMessage,
    ModelMessage,
    ModelTextPart,
    SystemModelMessage,
    ToolModelMessage,
    UserModelMessage,
)
from pai_grpc.lifecycle._decisions import HistoryRewritePatch
from pai_grpc.lifecycle._errors import VersionConflict
from pai_grpc.lifecycle._inputs import (
    AfterStepInput,
    ContextNext,
    PrepareHistoryRewriteInput,
    ResolveModelContextInput,
)
from pai_grpc.lifecycle._lifecycle import AgentLifecycle
from pai_grpc.lifecycle._protocols import TransactionFacade
from pai_grpc.models import LanguageModel, ModelCall

log = logging.getLogger("pai_grpc.lifecycle.compaction")

SUMMARY_INSTRUCTIONS = (
    "You maintain a running summary of a conversation between a user and an AI assistant. "
    "Merge the previous summary (if any) with the new messages into one concise summary that "
    "keeps every fact, decision, open question and commitment needed to continue the "
    "conversation. Answer with the summary only."
)
SUMMARY_PREFIX = "Summary of the earlier conversation:\n"


class ContextCompactor(AgentLifecycle):
    """Summarises older context once it grows past a threshold.

    Args:
        model: The model that writes summaries.
        max_messages: Compact when more context messages than this follow the
            last boundary.
        max_tokens: Also compact when the estimated context tokens exceed this
            (estimated from the last step's reported input tokens plus ~4
            characters per token for newer messages).
        keep_recent: Context messages kept verbatim after the boundary.
        key: The private-metadata key holding the compactor's state.
    """

    def __init__(
        self,
        model: LanguageModel,
        *,
        max_messages: int = 40,
        max_tokens: int | None = None,
        keep_recent: int = 10,
        key: str = "compaction",
        instructions: str = SUMMARY_INSTRUCTIONS,
        name: str = "compaction",
    ) -> None:
        if keep_recent < 1 or max_messages <= keep_recent:
            raise ValueError("need 1 <= keep_recent < max_messages")
        self.model = model
        self.max_messages = max_messages
        self.max_tokens = max_tokens
        self.keep_recent = keep_recent
        self.key = key
        self.instructions = instructions
        self.name = name
        #: Summaries written by this process (for logs and tests).
        self.summaries = 0

    def phases(self) -> frozenset[str]:
        """resolve_model_context and prepare_history_rewrite (after_step with max_tokens)."""
        phases = {"resolve_model_context", "prepare_history_rewrite"}
        if self.max_tokens is not None:
            phases.add("after_step")
        return frozenset(phases)

    # ---- state -------------------------------------------------------------

    def _state(self, private: JsonObject) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        raw = private.get(self.key)
        if not isinstance(raw, dict):
            return [], None
        boundaries = [b for b in raw.get("boundaries") or [] if isinstance(b, dict)]
        anchor = raw.get("usage_anchor")
        return boundaries, anchor if isinstance(anchor, dict) else None

    # ---- resolve_model_context --------------------------------------------

    async def resolve_model_context(
        self, input: ResolveModelContextInput, next: ContextNext
    ) -> list[ModelMessage]:
        """Compact from the durable base if due, then call next(base) exactly once."""
        assert input.history is not None
        private = await input.thread.private_metadata.get()
        boundaries, anchor = self._state(private)
        durable = await input.history.collect(view="context")
        tail = _after(durable, boundaries[-1]["through_message_id"]) if boundaries else durable
        if tail is None:
            # The boundary is no longer in the base (a rewrite we did not see): start over.
            boundaries, anchor, tail = [], None, durable
        if self._due(input, tail, anchor):
            committed = await self._compact(input, private, boundaries, tail)
            if committed is not None:
                boundaries, tail = committed
            else:
                # Someone changed the state meanwhile: build from what is stored now.
                private = await input.thread.private_metadata.get()
                boundaries, _ = self._state(private)
                tail = _after(durable, boundaries[-1]["through_message_id"]) if boundaries else None
                if tail is None:
                    boundaries, tail = [], durable
        base = input.history.convert(tail)
        if boundaries:
            base = [_summary_message(str(boundaries[-1].get("summary", ""))), *base]
        return await next(base)

    def _due(
        self,
        input: ResolveModelContextInput,
        tail: list[LifecycleMessage],
        anchor: dict[str, Any] | None,
    ) -> bool:
        if len(tail) <= self.keep_recent:
            return False
        if len(tail) > self.max_messages:
            return True
        if self.max_tokens is None:
            return False
        newer = tail
        tokens = 0
        if anchor is not None:
            after = _after(tail, str(anchor.get("through_message_id", "")))
            if after is not None:
                tokens = int(anchor.get("input_tokens") or 0)
                newer = after
        tokens += sum(len(m.message.model_dump_json()) for m in newer) // 4
        return tokens > self.max_tokens

    async def _compact(
        self,
        input: ResolveModelContextInput,
        private: JsonObject,
        boundaries: list[dict[str, Any]],
        tail: list[LifecycleMessage],
    ) -> tuple[list[dict[str, Any]], list[LifecycleMessage]] | None:
        assert input.history is not None
        cut = _fold_point(tail, len(tail) - self.keep_recent)
        if cut <= 0:
            return None
        folded, kept = tail[:cut], tail[cut:]
        previous = str(boundaries[-1].get("summary", "")) if boundaries else ""
        summary = await self._summarize(previous, input.history.convert(folded))
        state = {
            "boundaries": [
                *boundaries,
                {"through_message_id": folded[-1].message.id, "summary": summary},
            ],
            "usage_anchor": None,
        }

        async def stage(tx: TransactionFacade) -> None:
            await tx.private_metadata.merge({self.key: state})

        try:
            await input.thread.mutate(stage, expected_private_metadata=private)
        except VersionConflict:
            log.info(
                "thread %s: compaction state changed meanwhile; summary dropped",
                input.thread.thread_id,
            )
            return None
        self.summaries += 1
        return state["boundaries"], kept  # type: ignore[return-value]

    async def _summarize(self, previous: str, messages: Sequence[ModelMessage]) -> str:
        lines = [f"Previous summary:\n{previous}\n"] if previous else []
        lines.append("New messages:")
        for message in messages:
            lines.append(f"{message.role}: {_text_of(message)}")
        call = ModelCall(
            instructions=[SystemModelMessage(content=self.instructions)],
            messages=[UserModelMessage(content=[ModelTextPart(text="\n".join(lines))])],
        )
        stream = await self.model.stream(call)
        text: list[str] = []
        try:
            async for chunk in stream:
                if chunk.type == "text-delta":
                    text.append(chunk.text)
                elif chunk.type == "error":
                    raise RuntimeError(f"the summary model failed: {chunk.message or chunk.reason}")
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        return "".join(text).strip()

    # ---- history rewrites and usage ------------------------------------------

    async def prepare_history_rewrite(
        self, input: PrepareHistoryRewriteInput
    ) -> HistoryRewritePatch | None:
        """Context eligibility changed: clear the boundary stack and the usage anchor (CMP-02)."""
        rewrite = input.rewrite
        if rewrite.kind == "visibility" and all(
            c.before.context == c.after.context for c in rewrite.changes
        ):
            return None  # transcript-only: what the model sees is unchanged
        if self.key not in input.private_metadata:
            return None
        return HistoryRewritePatch(
            private_metadata={self.key: {"boundaries": [], "usage_anchor": None}}
        )

    async def after_step(self, input: AfterStepInput) -> None:
        """Remember the provider's input-token count for this context (the usage anchor)."""
        step = input.step
        if step is None or step.usage is None or not step.usage.input_tokens:
            return
        last = await _last_context_message(input)
        if last is None:
            return
        private = await input.thread.private_metadata.get()
        boundaries, _ = self._state(private)
        state = {
            "boundaries": boundaries,
            "usage_anchor": {"through_message_id": last, "input_tokens": step.usage.input_tokens},
        }

        async def stage(tx: TransactionFacade) -> None:
            await tx.private_metadata.merge({self.key: state})

        try:
            await input.thread.mutate(stage, expected_private_metadata=private)
        except VersionConflict:
            return  # a rewrite or a summary won: the anchor is stale anyway


async def _last_context_message(input: AfterStepInput) -> str | None:
    page = await input.thread.messages.list(view="context", order="desc", limit=1)
    return page.items[0].message.id if page.items else None


def _after(messages: list[LifecycleMessage], message_id: str) -> list[LifecycleMessage] | None:
    for i, m in enumerate(messages):
        if m.message.id == message_id:
            return messages[i + 1 :]
    return None


def _fold_point(tail: list[LifecycleMessage], cut: int) -> int:
    """Move the cut back so the kept part starts at a user message (no split tool turns)."""
    while cut > 0 and tail[cut].message.role != "user":
        cut -= 1
    return cut


def _summary_message(summary: str) -> UserModelMessage:
    return UserModelMessage(content=[ModelTextPart(text=SUMMARY_PREFIX + summary)])


def _text_of(message: ModelMessage) -> str:
    if isinstance(message, SystemModelMessage):
        return message.content
    out: list[str] = []
    if isinstance(message, UserModelMessage | AssistantModelMessage):
        for part in message.content:
            if part.type == "text":
                out.append(part.text)
            elif part.type == "tool-call":
                out.append(f"[called {part.tool_name}]")
    elif isinstance(message, ToolModelMessage):
        out += [f"[result of {p.tool_name}]" for p in message.content]
    return " ".join(out)
