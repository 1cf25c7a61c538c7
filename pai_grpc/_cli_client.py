"""Client commands of ``pai-grpc``: threads, runs, actions (and the connection flags of chat).

The client library is imported only when a command runs, so ``serve`` and
``health`` start without it. Every command reads ``PAI_ADDRESS`` and ``PAI_TOKEN`` (overridden by
``--address`` / ``--token``) and takes the ``--tls-*`` flags. Read commands
print for people by default and JSON with ``-o json`` (one document; a run
stream is one JSON object per line).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

from pai_grpc._wire import ClientTls, TlsError
from pai_grpc.config import DEFAULT_ADDRESS, ConfigError


def client_tls(ns: argparse.Namespace) -> ClientTls | None:
    """TLS of a client command: any ``--tls-*`` flag turns it on."""
    values = (ns.tls_ca, ns.tls_cert, ns.tls_key, ns.tls_server_name)
    if not any(values):
        return None
    try:
        return ClientTls(*values)
    except TlsError as e:
        raise ConfigError(str(e)) from e


def client_tls_flags(p: argparse.ArgumentParser) -> None:
    """The ``--tls-*`` flags of a client command."""
    p.add_argument("--tls-ca", help="connect with TLS, verifying the server against this PEM CA")
    p.add_argument("--tls-cert", help="PEM client certificate (mutual TLS)")
    p.add_argument("--tls-key", help="PEM private key of --tls-cert")
    p.add_argument("--tls-server-name", help="name the server certificate is checked for")


def connection_flags(p: argparse.ArgumentParser, *, token: bool = True) -> None:
    """``--address``, ``--token`` (from ``PAI_ADDRESS`` / ``PAI_TOKEN``) and the TLS flags."""
    p.add_argument(
        "--address",
        default=os.environ.get("PAI_ADDRESS") or DEFAULT_ADDRESS,
        help=f"server HOST:PORT (env PAI_ADDRESS, default {DEFAULT_ADDRESS})",
    )
    if token:
        p.add_argument(
            "--token",
            default=os.environ.get("PAI_TOKEN") or None,
            help="bearer token, when the server requires one (env PAI_TOKEN)",
        )
    client_tls_flags(p)


def _output_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-o", "--output", choices=("text", "json"), default="text", help="text or json (scripting)"
    )


def _dump(value: Any) -> Any:
    if isinstance(value, list):
        return [_dump(v) for v in value]
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    return value


def _print_json(value: Any, out: TextIO) -> None:
    print(json.dumps(_dump(value), indent=2, sort_keys=True), file=out)


# ----------------------------------------------------------------------- render


def _when(value: Any) -> str:
    return value.isoformat(timespec="seconds") if value is not None else "-"


def _run_line(run: Any) -> str:
    extra = f" ({run.reason})" if run.reason else ""
    return (
        f"{run.id}  {run.status}{extra}  steps={run.step_count} attempts={run.attempts} "
        f"last_seq={run.last_seq}  created {_when(run.created_at)}"
    )


# --------------------------------------------------------------------- commands


async def _threads_list(client: Any, ns: argparse.Namespace, out: TextIO) -> int:
    threads = []
    async for thread in client.threads(page_size=min(ns.limit, 100)):
        threads.append(thread)
        if len(threads) >= ns.limit:
            break
    if ns.output == "json":
        _print_json(threads, out)
        return 0
    for t in threads:
        print(
            f"{t.id}  {t.status}  agent={t.agent} messages={t.message_count}  "
            f"updated {_when(t.updated_at)}",
            file=out,
        )
    return 0


async def _threads_show(client: Any, ns: argparse.Namespace, out: TextIO) -> int:
    from pai_grpc._cli_chat import print_message

    thread = await client.get_thread(ns.thread)
    messages = [m async for m in client.messages(ns.thread)]
    if ns.output == "json":
        _print_json({"thread": _dump(thread), "messages": _dump(messages)}, out)
        return 0
    active = f" active_run={thread.active_run_id}" if thread.active_run_id else ""
    print(f"{thread.id}  {thread.status}  agent={thread.agent}{active}", file=out)
    for message in messages:
        print_message(message, out)
    return 0


async def _runs_list(client: Any, ns: argparse.Namespace, out: TextIO) -> int:
    runs = []
    async for run in client.runs(ns.thread, page_size=min(ns.limit, 100)):
        runs.append(run)
        if len(runs) >= ns.limit:
            break
    if ns.output == "json":
        _print_json(runs, out)
        return 0
    for run in runs:
        print(_run_line(run), file=out)
    return 0


async def _runs_show(client: Any, ns: argparse.Namespace, out: TextIO) -> int:
    from pai_grpc._cli_chat import action_line

    run = await client.get_run(ns.run)
    actions = await client.pending_actions(ns.run)
    if ns.output == "json":
        _print_json({"run": _dump(run), "pending_actions": _dump(actions)}, out)
        return 0
    print(_run_line(run), file=out)
    print(f"thread {run.thread_id}", file=out)
    if run.error is not None:
        print(f"error {run.error.reason}: {run.error.message}", file=out)
    for action in actions:
        print("waiting for " + action_line(action), file=out)
    return 0


async def _runs_stream(client: Any, ns: argparse.Namespace, out: TextIO) -> int:
    from pai_grpc._cli_chat import EventPrinter

    printer = EventPrinter(out)
    async for event in client.stream_run(ns.run, after_seq=ns.after_seq):
        if ns.output == "json":
            print(event.model_dump_json(), file=out, flush=True)
        else:
            printer.show(event)
    if ns.output != "json":
        printer.end()
    return 0


async def _actions_resolve(client: Any, ns: argparse.Namespace, out: TextIO) -> int:
    if ns.tool_output is not None:
        try:
            output = json.loads(ns.tool_output)
        except json.JSONDecodeError as e:
            raise ConfigError(f"--tool-output is not JSON: {e}") from e
        run = await client.resolve_action(ns.run, ns.action, tool_result=True, output=output)
    else:
        run = await client.resolve_action(
            ns.run, ns.action, approved=bool(ns.approve), reason=ns.reason
        )
    if ns.output == "json":
        _print_json(run, out)
    else:
        print(_run_line(run), file=out)
    return 0


Command = Callable[[Any, argparse.Namespace, TextIO], Awaitable[int]]


def _run_command(command: Command) -> Callable[[argparse.Namespace], int]:
    def run(ns: argparse.Namespace) -> int:
        from pai_grpc.client import CLI_RETRY, PaiClient, PaiClientError

        async def main() -> int:
            async with PaiClient(
                ns.address, token=ns.token, tls=client_tls(ns), retry=CLI_RETRY
            ) as client:
                try:
                    return await command(client, ns, sys.stdout)
                except PaiClientError as e:
                    print(f"error: {e.code.name} {e.reason}: {e.message}", file=sys.stderr)
                    for v in e.violations:
                        print(f"  {v.field}: {v.description}", file=sys.stderr)
                    return 1

        return asyncio.run(main())

    return run


def add_client_commands(sub: Any) -> None:
    """Register ``threads``, ``runs`` and ``actions`` on the ``pai-grpc`` subparsers."""

    def command(
        group: Any, name: str, fn: Command, help: str, *, output: bool = True
    ) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = group.add_parser(name, help=help, description=help)
        connection_flags(p)
        if output:
            _output_flag(p)
        p.set_defaults(fn=_run_command(fn))
        return p

    threads = sub.add_parser("threads", help="list threads or show one with its transcript")
    tsub = threads.add_subparsers(dest="threads_command", required=True)
    p = command(tsub, "list", _threads_list, "the caller's threads, newest first")
    p.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    p = command(tsub, "show", _threads_show, "a thread head and its transcript")
    p.add_argument("thread", help="thread id")

    runs = sub.add_parser("runs", help="list, show or stream runs")
    rsub = runs.add_subparsers(dest="runs_command", required=True)
    p = command(rsub, "list", _runs_list, "a thread's runs, newest first")
    p.add_argument("thread", help="thread id")
    p.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    p = command(rsub, "show", _runs_show, "a run and what it waits for")
    p.add_argument("run", help="run id")
    p = command(rsub, "stream", _runs_stream, "a run's events until it ends (resumes by seq)")
    p.add_argument("run", help="run id")
    p.add_argument("--after-seq", type=int, default=0, help="only events after this seq")

    actions = sub.add_parser("actions", help="resolve a pending action of a waiting run")
    asub = actions.add_subparsers(dest="actions_command", required=True)
    p = command(asub, "resolve", _actions_resolve, "approve, deny, or give a client tool's output")
    p.add_argument("run", help="run id")
    p.add_argument("action", help="pending action id")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--approve", action="store_true", help="approve the tool call")
    how.add_argument("--deny", action="store_true", help="deny the tool call")
    how.add_argument("--tool-output", metavar="JSON", help="a client tool's output (JSON)")
    p.add_argument("--reason", help="why (with --approve / --deny)")
