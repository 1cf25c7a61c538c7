"""The ``pai-grpc`` command: serve, migrate, chat, health."""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Sequence

from pai_grpc.config import DEFAULT_ADDRESS, ConfigError, Settings
from pai_grpc.telemetry._logs import LOG_FORMATS, setup_logging


def _settings(ns: argparse.Namespace) -> Settings:
    return Settings.from_env(
        address=getattr(ns, "address", None),
        database_url=getattr(ns, "database_url", None),
        config_path=getattr(ns, "config", None),
        metrics_address=getattr(ns, "metrics_address", None),
    )


def _run_process(ns: argparse.Namespace, *, runner_only: bool) -> int:
    """Load the agents (connecting tool servers), then run a server or runner until SIGTERM."""
    from opentelemetry import trace

    from pai_grpc._agents_setup import load_agents
    from pai_grpc.server import App, RunnerProcess
    from pai_grpc.telemetry import Telemetry
    from pai_grpc.telemetry._setup import start_metrics
    from storage import SchemaMismatch

    settings = _settings(ns)
    if getattr(ns, "no_runner", False):
        settings.embedded_runner = False
    if getattr(ns, "concurrency", None):
        settings.runner_concurrency = ns.concurrency

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
    telemetry = Telemetry(trace.NoOpTracerProvider(), export.meter_provider)

    async def main() -> None:
        agents, servers = await load_agents(settings)
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
        asyncio.run(main())
    except SchemaMismatch as e:
        logging.getLogger("pai_grpc").error("cannot start: %s", e)
        return 2
    finally:
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


def cmd_chat(ns: argparse.Namespace) -> int:
    """Send one message and print the streamed reply live."""
    from pai_grpc.client import chat

    return asyncio.run(chat(ns.address, ns.message, thread_id=ns.thread, token=ns.token))


def cmd_health(ns: argparse.Namespace) -> int:
    """Exit 0 when the server reports SERVING (for container health checks)."""
    from pai_grpc.client import check_health

    return 0 if asyncio.run(check_health(ns.address, ns.service, timeout=ns.timeout)) else 1


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

    chat = sub.add_parser("chat", help=cmd_chat.__doc__)
    chat.add_argument("message")
    chat.add_argument("--thread", help="continue this thread (default: a new one)")
    chat.add_argument("--address", default=DEFAULT_ADDRESS)
    chat.add_argument("--token", help="bearer token (when the server requires one)")
    chat.set_defaults(fn=cmd_chat)

    health_ = sub.add_parser("health", help=cmd_health.__doc__)
    health_.add_argument("--address", default=DEFAULT_ADDRESS)
    health_.add_argument("--service", default="")
    health_.add_argument("--timeout", type=float, default=3.0)
    health_.set_defaults(fn=cmd_health)
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
