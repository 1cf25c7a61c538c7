"""The interactive ``pai-grpc chat``, and how run events are shown to people.

A session reads lines from stdin: a message starts a run whose reply
streams as it arrives (a spinner waits for the first token, on a terminal
only); tool approvals and client tools are asked inline; ``/new``,
``/thread ID``, ``/history`` and ``/cancel`` manage the conversation. Ctrl-C
cancels the reply in progress (the run is cancelled on the server), not the
session; Ctrl-D ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import threading
from typing import Any, TextIO

from pai_grpc.client import (
    FailedPreconditionError,
    PaiClient,
    PaiClientError,
    RunHandle,
    RunStream,
    ThreadHandle,
)
from pai_grpc.domain import (
    AbortChunk,
    ChunkEvent,
    DataPart,
    ErrorChunk,
    FilePart,
    HookCallEvent,
    PendingAction,
    PendingActionEvent,
    ReasoningPart,
    ReasoningStartChunk,
    RunEvent,
    StartChunk,
    StartStepChunk,
    StatusEvent,
    TextDeltaChunk,
    TextPart,
    TextStartChunk,
    ToolCallChunk,
    ToolErrorChunk,
    ToolInputStartChunk,
    ToolOutputDeniedChunk,
    ToolPart,
    ToolResultChunk,
)

HELP = (
    "type a message and press Enter; /new starts a thread, /thread ID switches to one, "
    "/history shows the transcript, /cancel cancels the thread's active run; "
    "Ctrl-C cancels a reply, Ctrl-D exits"
)
_FRAMES = "|/-\\"


def part_line(part: Any) -> str:
    """One message part, for people."""
    match part:
        case TextPart(text=text):
            return text
        case ReasoningPart(text=text):
            return f"(thinking) {text}"
        case ToolPart():
            shown = f"[tool {part.tool_name} {json.dumps(part.input)} -> {part.state}"
            if part.output is not None:
                shown += f": {json.dumps(part.output)}"
            if part.error_text:
                shown += f": {part.error_text}"
            return shown + "]"
        case FilePart(url=url, media_type=media_type):
            return f"[file {media_type} {url[:60]}]"
        case DataPart(name=name, data=data):
            return f"[data-{name} {json.dumps(data)}]"
    return ""


def print_message(message: Any, out: TextIO) -> None:
    """``role: text`` of a transcript message (parts joined, empty ones left out)."""
    lines = [line for line in (part_line(p) for p in message.parts) if line]
    print(f"{message.role}: " + "\n  ".join(lines), file=out)


def action_line(action: PendingAction) -> str:
    """A pending action, for people."""
    request = f" request={json.dumps(action.request)}" if action.request is not None else ""
    return (
        f"{action.id}  {action.kind} {action.tool_name} input={json.dumps(action.input)}{request}"
    )


class EventPrinter:
    """Shows run events as they arrive: text inline, tools and statuses on lines of their own."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.mid_line = False
        self.status: str | None = None

    def line(self, text: str) -> None:
        """Print ``text`` on a line of its own."""
        if self.mid_line:
            self.out.write("\n")
        self.out.write(text + "\n")
        self.out.flush()
        self.mid_line = False

    def end(self) -> None:
        """Finish the current line."""
        if self.mid_line:
            self.out.write("\n")
            self.out.flush()
            self.mid_line = False

    def show(self, event: RunEvent) -> None:
        """Print one event (chunks that only frame the stream print nothing)."""
        payload = event.payload
        if isinstance(payload, StatusEvent):
            self.status = payload.status
            if payload.status in ("failed", "cancelled"):
                why = payload.error.message if payload.error else payload.reason
                self.line(f"[run {payload.status}" + (f": {why}]" if why else "]"))
            return
        if isinstance(payload, PendingActionEvent):
            self.line(f"[waiting for {action_line(payload.action)}]")
            return
        if not isinstance(payload, ChunkEvent):
            return
        chunk = payload.chunk
        match chunk:
            case TextDeltaChunk(text=text):
                self.out.write(text)
                self.out.flush()
                if text:
                    self.mid_line = not text.endswith("\n")
            case ToolCallChunk():
                self.line(f"[tool {chunk.tool_name} {json.dumps(chunk.input)}]")
            case ToolResultChunk(preliminary=False):
                self.line(f"[tool {chunk.tool_name} -> {json.dumps(chunk.output)}]")
            case ToolErrorChunk():
                self.line(f"[tool {chunk.tool_name} failed: {chunk.error_text}]")
            case ToolOutputDeniedChunk():
                self.line("[tool call denied]")
            case ErrorChunk():
                self.line(f"[error {chunk.reason}: {chunk.message}]")
            case AbortChunk(reason="recovery"):
                self.line("[the server restarted; the step starts again]")
            case AbortChunk(reason=reason):
                self.line(f"[step aborted: {reason or 'no reason'}]")


#: Chunks that only frame the stream: the spinner keeps turning through them.
_FRAMING = (StartChunk, StartStepChunk, TextStartChunk, ReasoningStartChunk, ToolInputStartChunk)


def _shows_something(event: RunEvent) -> bool:
    payload = event.payload
    if isinstance(payload, ChunkEvent):
        return not isinstance(payload.chunk, _FRAMING)
    if isinstance(payload, HookCallEvent):
        return False  # the chat prints nothing for a hook call: the spinner keeps turning
    return not isinstance(payload, StatusEvent) or payload.status != "running"


class _Lines:
    """Lines of a text stream, read by a thread so the event loop never blocks on input."""

    def __init__(self, stream: TextIO) -> None:
        self.queue: asyncio.Queue[str | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def read() -> None:
            while True:
                line = stream.readline()
                loop.call_soon_threadsafe(self.queue.put_nowait, line or None)
                if not line:
                    return

        threading.Thread(target=read, name="chat-input", daemon=True).start()

    async def get(self) -> str | None:
        """The next line without its newline; None at end of input (Ctrl-D)."""
        line = await self.queue.get()
        return None if line is None else line.rstrip("\r\n")


class _Spinner:
    """A turning bar on the terminal until the first token arrives."""

    def __init__(self, err: TextIO) -> None:
        self.err = err
        self.task: asyncio.Task[None] | None = asyncio.get_running_loop().create_task(self._spin())

    async def _spin(self) -> None:
        i = 0
        while True:
            self.err.write(f"\r{_FRAMES[i % len(_FRAMES)]} ")
            self.err.flush()
            i += 1
            await asyncio.sleep(0.1)

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            self.task = None
            self.err.write("\r  \r")
            self.err.flush()


class _EndOfInput(Exception):
    """Ctrl-D while a question was asked."""


class ChatSession:
    """An interactive conversation with one server (see the module docstring)."""

    def __init__(
        self,
        client: PaiClient,
        *,
        thread_id: str | None,
        agent: str,
        stdin: TextIO,
        out: TextIO,
        err: TextIO,
        tty: bool,
    ) -> None:
        self.client = client
        self.thread: ThreadHandle | None = client.thread(thread_id) if thread_id else None
        self.agent = agent
        self.stdin = stdin
        self.out = out
        self.err = err
        self.tty = tty
        self.reply: asyncio.Task[None] | None = None

    def _say(self, text: str) -> None:
        print(text, file=self.err, flush=True)

    def _prompt(self) -> None:
        self.out.write("> ")
        self.out.flush()

    def _interrupt(self) -> None:
        if self.reply is not None and not self.reply.done():
            self.reply.cancel()
        else:
            self.out.write("\n(Ctrl-D exits)\n")
            self._prompt()

    async def run(self) -> int:
        """Converse until end of input; the exit code of the command."""
        loop = asyncio.get_running_loop()
        self.lines = _Lines(self.stdin)
        loop.add_signal_handler(signal.SIGINT, self._interrupt)
        self._say(f"pai-grpc chat with {self.client.address}: {HELP}")
        try:
            while True:
                self._prompt()
                line = await self.lines.get()
                if line is None:
                    self.out.write("\n")
                    return 0
                text = line.strip()
                try:
                    if text.startswith("/"):
                        if not await self._command(text):
                            return 0
                    elif text:
                        await self._send(text)
                except PaiClientError as e:
                    self._say(f"error: {e.code.name} {e.reason}: {e.message}")
                except _EndOfInput:
                    self.out.write("\n")
                    return 0
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    async def _command(self, text: str) -> bool:
        """Run a slash command; False ends the session."""
        name, _, arg = text.partition(" ")
        arg = arg.strip()
        if name in ("/exit", "/quit"):
            return False
        if name == "/help":
            self._say(HELP)
        elif name == "/new":
            self.thread = await self.client.create_thread(agent=self.agent)
            self._say(f"thread {self.thread.id}")
        elif name == "/thread" and arg:
            info = await self.client.get_thread(arg)
            self.thread = ThreadHandle(self.client, info.id, info)
            self._say(f"thread {info.id} ({info.message_count} messages)")
        elif name == "/history":
            if self.thread is None:
                self._say("no thread yet")
            else:
                async for message in self.thread.messages():
                    print_message(message, self.out)
        elif name == "/cancel":
            await self._cancel_active()
        else:
            self._say(f"unknown command {name}; /help lists them")
        return True

    async def _cancel_active(self) -> None:
        if self.thread is None:
            self._say("no thread yet")
            return
        info = await self.thread.get()
        if not info.active_run_id:
            self._say("nothing to cancel")
            return
        await self._cancel(self.client.run(info.active_run_id))

    async def _cancel(self, run: RunHandle) -> None:
        with contextlib.suppress(FailedPreconditionError):  # it ended meanwhile
            await run.cancel("cancelled from the chat")
        self._say(f"[cancelled {run.id}]")

    async def _send(self, text: str) -> None:
        if self.thread is None:
            self.thread = await self.client.create_thread(agent=self.agent)
            self._say(f"thread {self.thread.id}")
        stream = await self.thread.send_and_stream(text)
        run = stream.run
        self.reply = asyncio.get_running_loop().create_task(self._follow(run, stream))
        try:
            await asyncio.wait([self.reply])
        finally:
            reply, self.reply = self.reply, None
        if reply.cancelled():  # Ctrl-C
            await self._cancel(run)
            return
        reply.result()  # re-raises what went wrong

    async def _follow(self, run: RunHandle, stream: RunStream) -> None:
        printer = EventPrinter(self.out)
        spinner = _Spinner(self.err) if self.tty else None
        try:
            async for event in stream:
                payload = event.payload
                if spinner is not None and _shows_something(event):
                    spinner.stop()
                if isinstance(payload, PendingActionEvent):
                    printer.end()
                    await self._resolve(run, payload.action)
                else:
                    printer.show(event)
        finally:
            if spinner is not None:
                spinner.stop()
            printer.end()

    async def _ask(self, question: str) -> str:
        self.out.write(question)
        self.out.flush()
        answer = await self.lines.get()
        if answer is None:
            raise _EndOfInput
        return answer.strip()

    async def _resolve(self, run: RunHandle, action: PendingAction) -> None:
        """Ask the person at the terminal to answer a pending action."""
        shown = json.dumps(action.input)
        if action.kind == "approval":
            while True:
                answer = await self._ask(
                    f"? allow {action.tool_name} {shown}? [y]es / [n]o (n: reason) "
                )
                yes, no = answer.lower() in ("y", "yes"), answer.lower().startswith("n")
                if yes:
                    await run.approve(action)
                    return
                if no:
                    reason = answer.partition(":")[2].strip() or None
                    await run.deny(action, reason)
                    return
        question = (
            f"? client tool {action.tool_name} {shown}: its output as JSON "
            if action.kind == "client_tool"
            else f"? {action.tool_name} asks for {json.dumps(action.request)}: JSON "
        )
        while True:
            answer = await self._ask(question)
            try:
                value = json.loads(answer)
            except json.JSONDecodeError:
                self._say("not JSON; try again (strings need quotes)")
                continue
            if action.kind == "client_tool":
                await run.submit_tool_result(action, value)
            else:
                await run.submit_data(action, value)
            return


def run_session(ns: Any, tls: Any) -> int:
    """``pai-grpc chat`` without a message: converse on this terminal until Ctrl-D."""
    import sys

    from pai_grpc.client import CLI_RETRY

    async def main() -> int:
        async with PaiClient(ns.address, token=ns.token, tls=tls, retry=CLI_RETRY) as client:
            session = ChatSession(
                client,
                thread_id=ns.thread,
                agent=ns.agent,
                stdin=sys.stdin,
                out=sys.stdout,
                err=sys.stderr,
                tty=sys.stdin.isatty() and sys.stdout.isatty(),
            )
            return await session.run()

    return asyncio.run(main())
