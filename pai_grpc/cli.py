"""The ``pai-grpc`` command: serve, runner, migrate, sweep, the client commands, hash-token."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Coroutine, Sequence
from typing import Any, Protocol, TypeVar

from pai_grpc._cli_client import add_client_commands, client_tls, connection_flags
from pai_grpc._wire import ServerTls, TlsError
from pai_grpc.config import DEFAULT_ADDRESS, ConfigError, Settings
from pai_grpc.telemetry import LOG_FORMATS, setup_logging

T = TypeVar("T")


def _settings(ns: argparse.Namespace) -> Settings:
    return Settings.from_env(
        address=getattr(ns, "address", None),
        database_url=getattr(ns, "database_url", None),
        config_path=getattr(ns, "config", None),
        insecure_dev=True if getattr(ns, "insecure_dev", False) else None,
        metrics_address=getattr(ns, "metrics_address", None),
        http_address=getattr(ns, "http_address", None),
    )


def _server_tls(ns: argparse.Namespace, settings: Settings) -> ServerTls | None:
    """The API port's TLS: each ``--tls-*`` flag overrides its key of ``[tls]``."""
    file = settings.tls
    cert = ns.tls_cert or (file.cert_file if file else None)
    key = ns.tls_key or (file.key_file if file else None)
    client_ca = ns.tls_client_ca or (file.client_ca_file if file else None)
    require = bool(ns.require_client_cert) or (file.require_client_cert if file else False)
    if not (cert or key or client_ca or require):
        return None
    if not cert or not key:
        raise ConfigError("TLS needs both a certificate and a key (--tls-cert and --tls-key)")
    try:
        tls = ServerTls(cert, key, client_ca_file=client_ca, require_client_cert=require)
        tls.configuration()  # unusable files stop the process now, not at the first handshake
    except TlsError as e:
        raise ConfigError(str(e)) from e
    return tls


class LoopRunner(Protocol):
    """Runs a coroutine to its end on a new event loop (``asyncio.run``, ``uvloop.run``)."""

    def __call__(self, main: Coroutine[Any, Any, T], /) -> T:
        """The coroutine's result."""
        ...


def loop_runner(choice: str) -> LoopRunner:
    """What runs the process's main coroutine, for ``[server] event_loop``.

    uvloop (libuv) takes about a tenth of the CPU a run costs off asyncio's
    own loop: every gRPC message, database round trip and task wake-up goes
    through the loop. ``auto`` falls back to asyncio where uvloop is not
    installed (it is a dependency everywhere it builds: not on Windows).

    Raises:
        ConfigError: ``uvloop`` was asked for and is not installed.
    """
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                raise ConfigError(
                    '[server] event_loop = "uvloop", but uvloop is not installed'
                ) from None
        else:
            return uvloop.run
    return asyncio.run


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """``uvloop`` or ``asyncio``: the implementation of ``loop``."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


def _run_process(ns: argparse.Namespace, *, runner_only: bool) -> int:
    """Load the agents (connecting tool servers), then run a server or runner until SIGTERM."""
    from opentelemetry import trace

    from pai_grpc._agents_setup import load_agents
    from pai_grpc._exposure import check_exposure
    from pai_grpc.server import App, RunnerProcess, cap_malloc_arenas
    from pai_grpc.telemetry import Telemetry, start_metrics, tracer_provider_from_settings
    from storage import SchemaMismatch, Unavailable

    cap_malloc_arenas()  # before any thread starts (the metrics server's is the first)
    settings = _settings(ns)
    if not runner_only:
        settings.tls = _server_tls(ns, settings)
    if getattr(ns, "no_runner", False):
        settings.embedded_runner = False
    if getattr(ns, "concurrency", None):
        settings.runner_concurrency = ns.concurrency
    if not runner_only:
        # Before connecting tool servers: a refused address fails at once (exit 2).
        check_exposure(settings, warn=False)
    run_on_loop = loop_runner(settings.file.server.event_loop)

    tracer_provider = tracer_provider_from_settings(settings)  # a bad [telemetry] fails first
    table = settings.file.metrics
    try:
        export = start_metrics(
            address=settings.metrics_address,
            otlp=table.otlp,
            otlp_interval_seconds=table.otlp_interval_seconds,
        )
    except (OSError, ValueError) as e:
        logging.getLogger("pai_grpc").error(
            "cannot serve metrics on %s: %s", settings.metrics_address, e
        )
        return 2
    telemetry = Telemetry(
        tracer_provider if tracer_provider is not None else trace.NoOpTracerProvider(),
        export.meter_provider,
    )

    async def main() -> None:
        logging.getLogger("pai_grpc").info("event loop: %s", loop_name(asyncio.get_running_loop()))
        agents, servers = await load_agents(settings, telemetry=telemetry)
        try:
            process: App | RunnerProcess = (
                RunnerProcess(settings, agents, telemetry=telemetry)
                if runner_only
                else App(settings, agents, telemetry=telemetry)
            )
            await process.run_until_signal()
        finally:
            for server in servers:
                await server.close()

    try:
        run_on_loop(main())
    except (SchemaMismatch, Unavailable) as e:
        logging.getLogger("pai_grpc").error("cannot start: %s", e)
        return 2
    finally:
        if tracer_provider is not None:
            tracer_provider.shutdown()  # flushes the spans still queued for export
        export.close()
    return 0


def cmd_serve(ns: argparse.Namespace) -> int:
    """Serve the API (and run an embedded runner)."""
    return _run_process(ns, runner_only=False)


def cmd_runner(ns: argparse.Namespace) -> int:
    """Run a runner-only process against the shared database."""
    return _run_process(ns, runner_only=True)


def cmd_migrate(ns: argparse.Namespace) -> int:
    """Apply database migrations up to the head revision."""
    from storage import Store, current_revision, head_revision, upgrade

    settings = _settings(ns)
    log = logging.getLogger("pai_grpc.migrate")

    async def run() -> None:
        store = Store.open(settings.database_url)
        try:
            before = await current_revision(store)
            await upgrade(store)
            log.info(
                "database %s: %s -> %s",
                store.engines.render_url(),
                before or "empty",
                head_revision(),
            )
        finally:
            await store.close()

    asyncio.run(run())
    return 0


def cmd_sweep(ns: argparse.Namespace) -> int:
    """Run one retention pass ([retention]) now and print what it did."""
    from pai_grpc.runtime import compaction_marker_body
    from storage import SchemaMismatch, Store, check_schema

    settings = _settings(ns)
    policy = settings.file.retention.policy()

    async def run() -> str:
        store = Store.open(settings.database_url)
        try:
            await check_schema(store)
            return str(await store.sweep(policy, encode_marker=compaction_marker_body))
        finally:
            await store.close()

    try:
        print(asyncio.run(run()))
    except SchemaMismatch as e:
        logging.getLogger("pai_grpc").error("cannot sweep: %s", e)
        return 2
    return 0


def cmd_chat(ns: argparse.Namespace) -> int:
    """Chat: without a message, an interactive session; with one, print the streamed reply."""
    from pai_grpc.client import chat

    if ns.message is None:
        from pai_grpc._cli_chat import run_session

        return run_session(ns, client_tls(ns))
    return asyncio.run(
        chat(
            ns.address,
            ns.message,
            thread_id=ns.thread,
            agent=ns.agent,
            token=ns.token,
            tls=client_tls(ns),
        )
    )


def cmd_health(ns: argparse.Namespace) -> int:
    """Exit 0 when the server reports SERVING (for container health checks)."""
    from pai_grpc._wire import check_health

    healthy = asyncio.run(
        check_health(ns.address, ns.service, timeout=ns.timeout, tls=client_tls(ns))
    )
    return 0 if healthy else 1


def cmd_hash_token(ns: argparse.Namespace) -> int:
    """Print `sha256:<hex>` of a token (read from stdin), for [auth] tokens and admin_tokens."""
    from pai_grpc._config_auth import hash_token

    token = sys.stdin.readline().rstrip("\r\n")
    if not token:
        print("hash-token: no token on stdin", file=sys.stderr)
        return 2
    print(hash_token(token))
    return 0


def _observability_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--metrics-address",
        metavar="HOST:PORT",
        help="serve Prometheus /metrics here ([metrics] address; default off)",
    )
    p.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        help="text (default) or json: one object per line with run and trace ids",
    )


def parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = argparse.ArgumentParser(prog="pai-grpc", description=__doc__)
    p.add_argument("--log-level", default="INFO")
    sub = p.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help=cmd_serve.__doc__)
    serve.add_argument("--address", help=f"HOST:PORT (env PAI_ADDRESS, default {DEFAULT_ADDRESS})")
    serve.add_argument("--database-url", help="env PAI_DATABASE_URL, default sqlite:///./pai.db")
    serve.add_argument("--config", help="TOML config file (env PAI_CONFIG)")
    serve.add_argument("--no-runner", action="store_true", help="serve the API only")
    serve.add_argument("--tls-cert", help="PEM certificate chain: serve TLS (overrides [tls])")
    serve.add_argument("--tls-key", help="PEM private key of --tls-cert")
    serve.add_argument("--tls-client-ca", help="PEM CA that client certificates must chain to")
    serve.add_argument(
        "--require-client-cert",
        action="store_true",
        help="mutual TLS: refuse clients without a certificate from --tls-client-ca",
    )
    serve.add_argument(
        "--insecure-dev",
        action="store_true",
        help="serve a non-loopback address with no auth configured (env PAI_INSECURE_DEV=1); "
        "anyone who can reach it gets full access",
    )
    serve.add_argument(
        "--http-address",
        metavar="HOST:PORT",
        help="also serve the API over Connect and gRPC-Web, and the console at /console/, "
        "here ([http] address; default off)",
    )
    _observability_flags(serve)
    serve.set_defaults(fn=cmd_serve)

    runner = sub.add_parser("runner", help=cmd_runner.__doc__)
    runner.add_argument("--database-url", help="env PAI_DATABASE_URL")
    runner.add_argument("--config", help="TOML config file (env PAI_CONFIG)")
    runner.add_argument("--concurrency", type=int, help="executions held at once")
    _observability_flags(runner)
    runner.set_defaults(fn=cmd_runner)

    migrate = sub.add_parser("migrate", help=cmd_migrate.__doc__)
    migrate.add_argument("--database-url", help="env PAI_DATABASE_URL")
    migrate.add_argument("--config", help="TOML config file (env PAI_CONFIG)")
    migrate.set_defaults(fn=cmd_migrate)

    sweep = sub.add_parser("sweep", help=cmd_sweep.__doc__)
    sweep.add_argument("--database-url", help="env PAI_DATABASE_URL")
    sweep.add_argument("--config", help="TOML config file with [retention] (env PAI_CONFIG)")
    sweep.set_defaults(fn=cmd_sweep)

    chat = sub.add_parser("chat", help=cmd_chat.__doc__)
    chat.add_argument("message", nargs="?", help="send this and exit (default: a session)")
    chat.add_argument("--thread", help="continue this thread (default: a new one)")
    chat.add_argument("--agent", default="", help="agent of new threads (default: the default)")
    connection_flags(chat)
    chat.set_defaults(fn=cmd_chat)

    health_ = sub.add_parser("health", help=cmd_health.__doc__)
    connection_flags(health_, token=False)
    health_.add_argument("--service", default="")
    health_.add_argument("--timeout", type=float, default=3.0)
    health_.set_defaults(fn=cmd_health)

    add_client_commands(sub)

    # The token comes on stdin, not as an argument, so it stays out of shell history and `ps`.
    hash_ = sub.add_parser("hash-token", help=cmd_hash_token.__doc__)
    hash_.set_defaults(fn=cmd_hash_token)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pai-grpc`` command."""
    ns = parser().parse_args(argv)
    setup_logging(ns.log_level, getattr(ns, "log_format", None) or "text")
    try:
        code: int = ns.fn(ns)
    except ConfigError as e:
        logging.getLogger("pai_grpc").error("configuration error: %s", e)
        return 2
    return code


if __name__ == "__main__":
    raise SystemExit(main())
