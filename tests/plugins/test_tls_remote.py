"""Plugins and tool servers over mutual TLS, configured by the TOML file.

The runtime dials the plugin and the tool server with its client certificate;
the plugin calls the runtime's HookHostService back over TLS with its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from pai.v1 import run_service_pb2, runs_pb2
from pai_grpc._wire import ClientTls, ServerTls
from pai_grpc.config import ConfigError, Settings
from pai_grpc.convert import struct_from_proto
from pai_grpc.lifecycle import PrepareRunInput, lifecycle
from pai_grpc.models import ScriptedModel, tool_call_step
from pai_grpc.plugin_sdk import serve_plugin
from pai_grpc.runtime import Agent, AgentRegistry
from pai_grpc.testing import serve_in_process
from pai_grpc.tools import ToolContext, tool
from pai_grpc.toolservice import serve_tools
from tests.certs import CertificateAuthority, Issued
from tests.runtime.support import collect, new_thread, send, transcript


class City(BaseModel):
    city: str


@tool(description="Weather")
async def weather(value: City, ctx: ToolContext) -> dict[str, Any]:
    return {"celsius": 21, "city": value.city}


def _client(issued: Issued, ca: Path) -> str:
    return (
        f'tls = {{ ca_file = "{ca}", cert_file = "{issued.cert_file}", '
        f'key_file = "{issued.key_file}", server_name = "localhost" }}\n'
    )


def _settings(tmp_path: Path, text: str) -> Settings:
    path = tmp_path / "pai.toml"
    path.write_text(text)
    settings = Settings()
    settings.load_file(path)
    return settings


async def test_a_plugin_and_a_tool_server_are_reached_over_mutual_tls(
    tmp_path: Path, sqlite_url: str
) -> None:
    from pai_grpc._agents_setup import load_agents

    ca = CertificateAuthority()
    ca_file = ca.write(tmp_path / "ca.pem")
    runtime_client = ca.issue_client(tmp_path / "runtime", "runtime")
    host_cert = ca.issue_server(tmp_path / "host")
    plugin_cert = ca.issue_server(tmp_path / "plugin")
    plugin_client = ca.issue_client(tmp_path / "plugin-client", "guard-plugin")
    tools_cert = ca.issue_server(tmp_path / "tools")

    async def prepare_run(i: PrepareRunInput) -> None:
        # A facade call: the plugin calls HookHostService back over mutual TLS.
        await i.run.metadata.merge({"checked_by": "guard"})

    def mutual(issued: Issued) -> ServerTls:
        return ServerTls(
            str(issued.cert_file),
            str(issued.key_file),
            client_ca_file=str(ca_file),
            require_client_cert=True,
        )

    plugin = await serve_plugin(
        lifecycle("guard", prepare_run=prepare_run),
        tls=mutual(plugin_cert),
        host_tls=ClientTls(
            ca_file=str(ca_file),
            cert_file=str(plugin_client.cert_file),
            key_file=str(plugin_client.key_file),
        ),
    )
    tools, tools_port = await serve_tools([weather], tls=mutual(tools_cert))
    settings = _settings(
        tmp_path,
        f"""
[agents.helper]
model = "offline"
tools = ["weather"]
[[agents.helper.lifecycle]]
kind = "plugin"
address = "127.0.0.1:{plugin.port}"
timeout_ms = 10000
{_client(runtime_client, ca_file)}
[hook_host.tls]
cert_file = "{host_cert.cert_file}"
key_file = "{host_cert.key_file}"
client_ca_file = "{ca_file}"
require_client_cert = true

[tool_servers.weather]
address = "127.0.0.1:{tools_port}"
{_client(runtime_client, ca_file)}
""",
    )
    agents, opened = await load_agents(settings)
    try:
        configured = agents.resolve("helper")
        model = ScriptedModel(
            [tool_call_step(("c1", "weather", {"city": "Lyon"})), "It is 21 degrees."]
        )
        # The configured hooks and the remote tool, answered by a scripted model.
        agent = Agent(
            name="helper",
            model=model,
            lifecycle=configured.lifecycle,
            tools=configured.tools,
        )
        async with serve_in_process(sqlite_url, agents=AgentRegistry([agent])) as srv:
            thread_id = await new_thread(srv)
            run_id = (await send(srv, thread_id, "weather in Lyon?")).run_id
            await collect(srv, run_id)
            run = (await srv.runs.GetRun(run_service_pb2.GetRunRequest(run_id=run_id))).run
            assert run.status == runs_pb2.RUN_STATUS_COMPLETED, run.error
            assert struct_from_proto(run.metadata) == {"checked_by": "guard"}
            assert ("assistant", "It is 21 degrees.") in await transcript(srv, thread_id)
        result = model.calls[1].messages[-1].content[0]
        assert result.output.value == {"celsius": 21, "city": "Lyon"}
    finally:
        for item in reversed(opened):
            await item.close()
        await plugin.stop(0.5)
        await tools.stop(0)


async def test_a_plugin_requiring_client_certificates_refuses_a_runtime_without_one(
    tmp_path: Path,
) -> None:
    from pai_grpc._agents_setup import load_agents

    ca = CertificateAuthority()
    ca_file = ca.write(tmp_path / "ca.pem")
    plugin_cert = ca.issue_server(tmp_path / "plugin")
    plugin = await serve_plugin(
        lifecycle("guard", prepare_run=lambda i: None),
        tls=ServerTls(
            str(plugin_cert.cert_file),
            str(plugin_cert.key_file),
            client_ca_file=str(ca_file),
            require_client_cert=True,
        ),
    )
    settings = _settings(
        tmp_path,
        f'[agents.helper]\nmodel = "offline"\n[[agents.helper.lifecycle]]\nkind = "plugin"\n'
        f'address = "127.0.0.1:{plugin.port}"\ntls = {{ ca_file = "{ca_file}" }}\n',
    )
    try:
        with pytest.raises(ConfigError, match="unreachable at start-up: UNAVAILABLE"):
            await load_agents(settings)
    finally:
        await plugin.stop(0.5)
