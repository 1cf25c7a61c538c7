"""RMC-01..RMC-10: resolve_model_context, its history and its narrowed facade."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from pai.v1 import thread_service_pb2 as tpb
from pai_grpc.domain import (
    AssistantModelMessage,
    LifecycleMessage,
    ModelMessage,
    ModelReasoningPart,
    ModelTextPart,
    ReasoningPart,
    SystemModelMessage,
    TextPart,
    ToolModelMessage,
    UserModelMessage,
)
from pai_grpc.lifecycle import (
    Continue,
    NextStep,
    PrepareModelStepInput,
    PrepareRunInput,
    ResolveModelContextInput,
    RunPatch,
    lifecycle,
)
from pai_grpc.models import ModelCall, ScriptedModel, to_model_messages, tool_call_step
from pai_grpc.tools import tool
from tests.lifecycle.harness import harness

Env = dict[str, Any]
Next = Any


def text_of(m: LifecycleMessage) -> str:
    return "".join(p.text for p in m.message.parts if isinstance(p, TextPart))


def model_text(m: ModelMessage) -> str:
    if isinstance(m, SystemModelMessage):
        return m.content
    if isinstance(m, UserModelMessage | AssistantModelMessage):
        return "".join(p.text for p in m.content if isinstance(p, ModelTextPart))
    return ""


def texts(messages: list[ModelMessage]) -> list[str]:
    return [model_text(m) for m in messages]


def system(text: str) -> SystemModelMessage:
    return SystemModelMessage(content=text)


def user(text: str) -> UserModelMessage:
    return UserModelMessage(content=[ModelTextPart(text=text)])


async def failure(action: Any) -> tuple[str, str]:
    """Run ``action``; return (exception type, reason) of what it raised."""
    try:
        await action()
    except Exception as e:
        return type(e).__name__, str(getattr(e, "reason", ""))
    return "", "no error"


def history_of(i: ResolveModelContextInput) -> Any:
    assert i.history is not None
    return i.history


class Echo(BaseModel):
    word: str


@tool(description="Echo a word.")
async def echo(value: Echo) -> str:
    return value.word


def tool_then(answer: str) -> ScriptedModel:
    """Calls ``echo`` once, then answers."""

    def script(call: ModelCall) -> Any:
        if any(isinstance(m, ToolModelMessage) for m in call.messages):
            return answer
        return tool_call_step(("c1", "echo", {"word": "ping"}))

    return ScriptedModel(script)


# ---- RMC-01 ---------------------------------------------------------------------


@pytest.mark.rule("RMC-01")
@pytest.mark.parametrize("order", ["ab", "ba"])
async def test_composed_resolvers_nest_first_part_outermost(
    database_url: str, hooks_mode: str, order: str
) -> None:
    log: list[Any] = []

    def layer(name: str) -> Any:
        async def resolve(i: ResolveModelContextInput, nxt: Next) -> list[ModelMessage]:
            log.append(f"{name}:enter")
            got = await nxt()
            log.append((f"{name}:got", texts(got)))
            return [*got, system(f"by {name}")]

        return lifecycle(name, resolve_model_context=resolve)

    outer, inner = order[0], order[1]
    model = ScriptedModel(["ok"])
    async with harness(
        database_url, [layer(outer), layer(inner)], model=model, mode=hooks_mode
    ) as h:
        _, done = await h.ask("hi")
        assert done.status == "completed"

    assert log == [
        f"{outer}:enter",
        f"{inner}:enter",
        (f"{inner}:got", ["hi"]),
        (f"{outer}:got", ["hi", f"by {inner}"]),
    ]
    assert texts(model.calls[0].messages) == ["hi", f"by {inner}", f"by {outer}"]


# ---- RMC-02 ---------------------------------------------------------------------


@pytest.mark.rule("RMC-02")
async def test_next_called_repeatedly_returns_the_memoised_downstream_result(
    database_url: str, hooks_mode: str
) -> None:
    results: list[list[list[str]]] = []
    inner_calls: list[int] = []

    async def outer(i: ResolveModelContextInput, nxt: Next) -> list[ModelMessage]:
        got = [await nxt(), await nxt(), await nxt()]
        results.append([texts(g) for g in got])
        return got[-1]

    counter = [0]

    async def inner(i: ResolveModelContextInput, nxt: Next) -> list[ModelMessage]:
        counter[0] += 1
        assert i.step is not None
        inner_calls.append(i.step.index)
        return [*await nxt(), system(f"inner run {counter[0]}")]

    hooks = [
        lifecycle("outer", resolve_model_context=outer),
        lifecycle("inner", resolve_model_context=inner),
    ]
    model = ScriptedModel(["a1", "a2"])
    async with harness(database_url, hooks, model=model, mode=hooks_mode) as h:
        thread_id, _ = await h.ask("q1")
        _, done = await h.ask("q2", thread_id)
        assert done.status == "completed"

    # Once per step, however often the outer layer asked; memoised per step only.
    assert inner_calls == [0, 0]  # step 0 of each run
    first, second = results
    assert first == [["q1", "inner run 1"]] * 3
    assert second == [["q1", "a1", "q2", "inner run 2"]] * 3
    assert texts(model.calls[1].messages) == ["q1", "a1", "q2", "inner run 2"]


# ---- RMC-03 ---------------------------------------------------------------------


@pytest.mark.rule("RMC-03")
async def test_next_with_a_base_replaces_the_leaf_and_runs_every_inner_layer(
    database_url: str, hooks_mode: str
) -> None:
    seen: Env = {"b": [], "c": []}

    async def a(i: ResolveModelContextInput, nxt: Next) -> list[ModelMessage]:
        based = await nxt([user("BASE")])
        seen["plain"] = texts(await nxt())  # the ordinary leaf is still there
        return based

    async def b(i: ResolveModelContextInput, nxt: Next) -> list[ModelMessage]:
        got = await nxt()
        seen["b"].append(texts(got))
        return [*got, system("b")]

    async def c(i: ResolveModelContextInput, nxt: Next) -> list[ModelMessage]:
        got = await nxt()
        seen["c"].append(texts(got))
        return [*got, system("c")]

    hooks = [
        lifecycle("a", resolve_model_context=a),
        lifecycle("b", resolve_model_context=b),
        lifecycle("c", resolve_model_context=c),
    ]
    model = ScriptedModel(["ok"])
    async with harness(database_url, hooks, model=model, mode=hooks_mode) as h:
        _, done = await h.ask("durable question")
        assert done.status == "completed"

    assert seen["c"] == [["BASE"], ["durable question"]]
    assert seen["b"] == [["BASE", "c"], ["durable question", "c"]]
    assert seen["plain"] == ["durable question", "c", "b"]
    assert texts(model.calls[0].messages) == ["BASE", "c", "b"]


# ---- RMC-04 ---------------------------------------------------------------------


@pytest.mark.rule("RMC-04")
@pytest.mark.parametrize("with_resolver", [True, False], ids=["resolver", "no-resolver"])
async def test_default_leaf_is_every_context_message_in_order(
    database_url: str, hooks_mode: str, with_resolver: bool
) -> None:
    leaf: list[list[ModelMessage]] = []

    async def prepare_run(i: PrepareRunInput) -> None:
        if i.latest_user_message is None or text_of(i.latest_user_message) != "first":
            return
        m = i.thread.messages
        await m.append(role="user", parts=[TextPart(text="HIDDEN")], visibility={"context": False})
        await m.append(
            role="system", parts=[TextPart(text="NOTE")], visibility={"transcript": False}
        )
        await m.append(
            role="assistant",
            parts=[TextPart(text="NOWHERE")],
            visibility={"context": False, "transcript": False},
        )

    async def resolve(i: ResolveModelContextInput, nxt: Next) -> list[ModelMessage]:
        got = await nxt()
        leaf.append(got)
        return got

    phases: dict[str, Any] = {"prepare_run": prepare_run}
    if with_resolver:
        phases["resolve_model_context"] = resolve
    model = ScriptedModel(["a1", "a2"])
    async with harness(
        database_url, lifecycle("leaf", **phases), model=model, mode=hooks_mode
    ) as h:
        thread_id, _ = await h.ask("first")
        _, done = await h.ask("second", thread_id)
        assert done.status == "completed"
        stored = await h.messages(thread_id)

    context = [m.message for m in stored if m.visibility.context]
    assert [m.role for m in model.calls[1].messages] == ["user", "system", "assistant", "user"]
    assert texts(model.calls[1].messages) == ["first", "NOTE", "a1", "second"]
    assert model.calls[1].messages == to_model_messages(context[:-1])
    assert model.calls[0].messages == to_model_messages(context[:2])
    if with_resolver:
        assert leaf == [model.calls[0].messages, model.calls[1].messages]


# ---- RMC-05 / RMC-06 ---------------------------------------------------------------


@pytest.mark.rule("RMC-05")
@pytest.mark.rule("RMC-06")
async def test_history_is_anchored_at_the_step_start(database_url: str, hooks_mode: str) -> None:
    seen: list[Env] = []

    async def prepare_run(i: PrepareRunInput) -> None:
        # The newest physical record at the first step's start is not context-visible.
        await i.thread.messages.append(
            role="assistant",
            parts=[TextPart(text="transcript only")],
            visibility={"context": False},
        )

    async def resolve(i: ResolveModelContextInput, nxt: Next) -> list[ModelMessage]:
        history = history_of(i)
        through = history.through
        assert through is not None
        first_id = (await history.collect(view="all"))[0].message.id
        pages: list[list[str]] = []
        token = ""
        for size in (1, 2, 1, 3, 100):
            page = await history.before(view="all", limit=size, page_token=token)
            pages.append([m.message.id for m in page.items])
            token = page.next_page_token
            if not token:
                break
        desc = await history.before(view="all", order="desc", limit=1)
        seen.append(
            {
                "through": through.message.id,
                "through_text": text_of(through),
                "collect": [text_of(m) for m in await history.collect()],
                "collect_all": [m.message.id for m in await history.collect(view="all")],
                "collect_transcript": [
                    text_of(m) for m in await history.collect(view="transcript")
                ],
                "collect_desc": [text_of(m) for m in await history.collect(order="desc")],
                "after_first": [
                    text_of(m) for m in await history.collect(view="all", after_message_id=first_id)
                ],
                "after_through": [
                    text_of(m)
                    for m in await history.collect(view="all", after_message_id=through.message.id)
                ],
                "before_pages": pages,
                "before_desc": [m.message.id for m in desc.items],
                "before_context": [text_of(m) for m in (await history.before()).items],
            }
        )
        return await nxt()

    hooks = lifecycle("anchor", prepare_run=prepare_run, resolve_model_context=resolve)
    async with harness(
        database_url, hooks, model=tool_then("done"), tools=[echo], mode=hooks_mode
    ) as h:
        thread_id, done = await h.ask("question")
        assert done.status == "completed"
        stored = await h.messages(thread_id)

    ids = [m.message.id for m in stored]
    question, hidden, tool_step = ids[0], ids[1], ids[2]
    first, second = seen
    # Step 0: the anchor is the newest physical record when the step started.
    assert first["through"] == hidden
    assert first["collect"] == ["question"]  # context view: the anchor does not match
    assert first["collect_all"] == [question, hidden]  # ...but it does in the "all" view
    assert first["collect_transcript"] == ["question", "transcript only"]
    assert first["after_first"] == ["transcript only"]
    assert first["after_through"] == []
    # before() is strictly below the anchor, whatever the page sizes.
    assert [i for page in first["before_pages"] for i in page] == [question]
    assert first["before_desc"] == [question]
    # Step 1: the anchor moved to the step-0 assistant message (context-visible).
    assert second["through"] == tool_step
    assert second["collect"] == ["question", second["through_text"]]
    assert second["collect_desc"] == [second["through_text"], "question"]
    assert second["collect_all"] == [question, hidden, tool_step]
    assert [i for page in second["before_pages"] for i in page] == [question, hidden]
    assert second["before_pages"][0] == [question]  # page size 1, then 2
    assert second["before_desc"] == [hidden]
    assert second["before_context"] == ["question"]
    assert tool_step not in [i for page in second["before_pages"] for i in page]


@pytest.mark.rule("RMC-05")
async def test_history_collect_follows_every_page(database_url: str, hooks_mode: str) -> None:
    seen: Env = {}
    count = 1205

    async def prepare_run(i: PrepareRunInput) -> None:
        async def many(tx: Any) -> None:
            for n in range(count):
                await tx.messages.append(
                    role="user" if n % 2 == 0 else "assistant",
                    parts=[TextPart(text=f"m{n}")],
                    visibility={"context": n % 3 != 0},
                )

        await i.thread.mutate(many)

    async def resolve(i: ResolveModelContextInput, nxt: Next) -> list[ModelMessage]:
        history = history_of(i)
        seen["collect"] = [text_of(m) for m in await history.collect()]
        seen["collect_all"] = len(await history.collect(view="all"))
        seen["model_messages"] = len(await history.model_messages())
        return (await nxt())[-3:]

    hooks = lifecycle("long", prepare_run=prepare_run, resolve_model_context=resolve)
    async with harness(database_url, hooks, mode=hooks_mode) as h:
        _, done = await h.ask("start")
        assert done.status == "completed"

    expected = ["start"] + [f"m{n}" for n in range(count) if n % 3 != 0]
    assert len(expected) > 800
    assert seen["collect"] == expected
    assert seen["collect_all"] == count + 1 > 1000
    assert seen["model_messages"] == len(expected)


# ---- RMC-07 ---------------------------------------------------------------------


@pytest.mark.rule("RMC-07")
async def test_messages_appended_after_the_step_started_never_leak_into_it(
    database_url: str, hooks_mode: str
) -> None:
    hold, release = asyncio.Event(), asyncio.Event()
    seen: list[Env] = []

    async def resolve(i: ResolveModelContextInput, nxt: Next) -> list[ModelMessage]:
        history = history_of(i)
        if not seen:
            await i.thread.messages.append(role="system", parts=[TextPart(text="late note")])
            hold.set()
            await release.wait()  # meanwhile a user steers the run
        before = await history.before(view="all", limit=100)
        seen.append(
            {
                "through": text_of(history.through),
                "collect": [text_of(m) for m in await history.collect(view="all")],
                "before": [text_of(m) for m in before.items],
                "model": texts(await history.model_messages()),
                "next": texts(await nxt()),
                "current": [text_of(m) for m in (await i.thread.context.current()).messages],
            }
        )
        return await nxt()

    model = ScriptedModel(["first answer", "second answer"])
    hooks = lifecycle("late", resolve_model_context=resolve)
    async with harness(database_url, hooks, model=model, mode=hooks_mode) as h:
        thread_id = await h.thread()
        handle = await h.send(thread_id, "question")
        await asyncio.wait_for(hold.wait(), 10)
        steer = await h.send(thread_id, "steer", delivery=tpb.DELIVERY_STEER)
        assert steer.run_id == handle.run_id
        release.set()
        done = await h.finish(handle.run_id)
        assert done.status == "completed"

    first, second = seen
    assert first["through"] == "question"
    for key in ("collect", "model", "next"):
        assert first[key] == ["question"], key
    assert first["before"] == []
    # The facade itself is live (not history): it does see them.
    assert first["current"] == ["question", "late note", "steer"]
    assert texts(model.calls[0].messages) == ["question"]
    # They are real messages: the next step sees them.
    assert second["through"] == "first answer"
    assert second["next"] == ["question", "late note", "steer", "first answer"]
    assert texts(model.calls[1].messages) == ["question", "late note", "steer", "first answer"]


# ---- RMC-08 ---------------------------------------------------------------------


@pytest.mark.rule("RMC-08")
async def test_the_resolver_facade_cannot_change_visibility(
    database_url: str, hooks_mode: str
) -> None:
    seen: Env = {}

    async def resolve(i: ResolveModelContextInput, nxt: Next) -> list[ModelMessage]:
        t = i.thread
        through = history_of(i).through
        assert through is not None
        target = [through.message.id]
        seen["direct"] = await failure(lambda: t.messages.update_visibility(target, context=False))

        async def inside(tx: Any) -> None:
            await tx.metadata.merge({"staged": True})
            await tx.messages.update_visibility(target, transcript=False)

        seen["mutate"] = await failure(lambda: t.mutate(inside))
        # Other writes stay available to the resolver.
        await t.private_metadata.merge({"resolver": "wrote"})
        return await nxt()

    async def prepare_model_step(i: PrepareModelStepInput) -> None:
        # The ordinary facade of the same step may change visibility.
        assert i.input is not None
        first = (await i.thread.messages.list(view="all", limit=1)).items[0]
        await i.thread.messages.update_visibility([first.message.id], transcript=False)
        seen["hidden"] = first.message.id

    hooks = lifecycle(
        "narrow", resolve_model_context=resolve, prepare_model_step=prepare_model_step
    )
    model = ScriptedModel(["ok"])
    async with harness(database_url, hooks, model=model, mode=hooks_mode) as h:
        thread_id, done = await h.ask("keep me visible")
        assert done.status == "completed"
        stored = await h.messages(thread_id)
        record = await h.thread_record(thread_id)

    assert seen["direct"] == ("FacadeClosed", "VISIBILITY_NOT_ALLOWED")
    assert seen["mutate"] == ("FacadeClosed", "VISIBILITY_NOT_ALLOWED")
    assert record.metadata == {}  # nothing of the refused mutation committed
    assert record.private_metadata == {"resolver": "wrote"}
    question = stored[0]
    assert question.message.id == seen["hidden"]
    # Only the ordinary facade's change happened: context untouched, transcript hidden.
    assert (question.visibility.context, question.visibility.transcript) == (True, False)
    assert texts(model.calls[0].messages) == ["keep me visible"]


# ---- RMC-09 ---------------------------------------------------------------------


@pytest.mark.rule("RMC-09")
async def test_run_local_model_messages_are_appended_after_the_resolver(
    database_url: str, hooks_mode: str
) -> None:
    seen: list[list[str]] = []

    def prepare_run(i: PrepareRunInput) -> Any:
        return Continue(RunPatch(append_model_messages=[system("RUN OVERLAY")]))

    async def resolve(i: ResolveModelContextInput, nxt: Next) -> list[ModelMessage]:
        got = await nxt()
        seen.append(texts(got))
        seen.append(texts(await history_of(i).model_messages()))
        return [system("RESOLVED"), got[0]]

    def after_step(i: Any) -> Any:
        if i.step.index == 0:
            return NextStep(append_model_messages=[user("STEP OVERLAY")])
        return None

    hooks = lifecycle(
        "overlay", prepare_run=prepare_run, resolve_model_context=resolve, after_step=after_step
    )
    model = ScriptedModel(["a1", "a2"])
    async with harness(database_url, hooks, model=model, mode=hooks_mode) as h:
        _, done = await h.ask("question")
        assert done.status == "completed"

    # The resolver never sees the model-only overlay...
    assert seen == [["question"], ["question"], ["question", "a1"], ["question", "a1"]]
    # ...which the runtime appends after whatever the resolver returned.
    assert texts(model.calls[0].messages) == ["RESOLVED", "question", "RUN OVERLAY"]
    assert texts(model.calls[1].messages) == [
        "RESOLVED",
        "question",
        "RUN OVERLAY",
        "STEP OVERLAY",
    ]


# ---- RMC-10 ---------------------------------------------------------------------


@pytest.mark.rule("RMC-10")
async def test_model_context_comes_from_the_native_messages(
    database_url: str, hooks_mode: str
) -> None:
    seen: Env = {}
    signature = {"anthropic": {"signature": "sig-R"}}
    cache = {"anthropic": {"cacheControl": {"type": "ephemeral"}}}

    async def prepare_run(i: PrepareRunInput) -> None:
        if i.latest_user_message is None or text_of(i.latest_user_message) != "first":
            return
        appended = await i.thread.messages.append(
            role="assistant",
            parts=[
                ReasoningPart(text="because", provider_metadata=signature),
                TextPart(text="native answer", provider_metadata=cache),
            ],
            metadata={"tag": "PUBLIC-TAG"},
            private_metadata={"k": "PRIVATE-K"},
        )
        assert appended is not None
        seen["appended"] = appended.message.id

    async def resolve(i: ResolveModelContextInput, nxt: Next) -> list[ModelMessage]:
        history = history_of(i)
        lifecycle_messages = await history.collect()
        if text_of(lifecycle_messages[-1]) == "give back":
            # The public lifecycle projection is not model input.
            return lifecycle_messages  # type: ignore[return-value]
        seen["next"] = await nxt()
        seen["history"] = await history.model_messages()
        seen["current"] = (await i.thread.context.current()).model_messages
        return seen["next"]  # type: ignore[no-any-return]

    hooks = lifecycle("native", prepare_run=prepare_run, resolve_model_context=resolve)
    model = ScriptedModel(["a1"])
    async with harness(database_url, hooks, model=model, mode=hooks_mode) as h:
        thread_id, _ = await h.ask("first")
        _, done = await h.ask("second", thread_id)
        assert done.status == "completed"
        stored = {m.message.id: m for m in await h.messages(thread_id)}
        run_id = done.run.id

        _, refused = await h.ask("give back", thread_id)
        assert refused.status == "failed"
        assert refused.run.error.reason == "HOOK_INVALID_DECISION"
        assert len(model.calls) == 2

    native = stored[seen["appended"]]
    assert native.private_metadata == {"k": "PRIVATE-K"}
    assert seen["next"] == seen["history"] == seen["current"]
    (assistant,) = [
        m
        for m in seen["next"]
        if isinstance(m, AssistantModelMessage) and "native" in model_text(m)
    ]
    assert assistant.content == [
        ModelReasoningPart(text="because", provider_options=signature),
        ModelTextPart(text="native answer", provider_options=cache),
    ]
    # What the provider got: the native values, none of the lifecycle facts.
    sent = model.calls[1].messages
    assert ModelTextPart(text="native answer", provider_options=cache) in [
        p for m in sent if isinstance(m, AssistantModelMessage) for p in m.content
    ]
    dumped = "".join(m.model_dump_json() for m in sent)
    for fact in ("PRIVATE-K", "PUBLIC-TAG", seen["appended"], run_id, "visibility"):
        assert fact not in dumped


@pytest.mark.rule("RMC-04")
async def test_context_eligibility_follows_visibility_rewrites(
    database_url: str, hooks_mode: str
) -> None:
    """Hiding a message from context removes it from later default leaves."""
    env: Env = {}

    async def prepare_run(i: PrepareRunInput) -> None:
        if i.latest_user_message is not None and text_of(i.latest_user_message) == "third":
            await i.thread.messages.update_visibility([env["first"]], context=False)

    model = ScriptedModel(["a1", "a2", "a3"])
    async with harness(
        database_url, lifecycle("rewrite", prepare_run=prepare_run), model=model, mode=hooks_mode
    ) as h:
        thread_id, _ = await h.ask("first")
        env["first"] = (await h.messages(thread_id))[0].message.id
        await h.ask("second", thread_id)
        _, done = await h.ask("third", thread_id)
        assert done.status == "completed"

    assert texts(model.calls[1].messages) == ["first", "a1", "second"]
    assert texts(model.calls[2].messages) == ["a1", "second", "a2", "third"]
