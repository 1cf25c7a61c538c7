"""The TOML config file refuses mistakes: unknown keys and wrong types stop start-up with a
message naming the file, the table and the key; plugin phase overrides inherit the plugin's
policy; the configuration reference (docs/configuration.md) is generated and kept fresh."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from pai.v1 import runs_pb2
from pai_grpc.config import ConfigError, Settings

CLI = [sys.executable, "-m", "pai_grpc.cli"]
REFERENCE = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"


def load(tmp_path: Path, body: str) -> Settings:
    config = tmp_path / "pai.toml"
    config.write_text(body)
    settings = Settings(config_path=str(config), offline_chunk_delay=0)
    settings.load_file(config)
    return settings


def refused(tmp_path: Path, body: str) -> str:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, body)
    message = str(info.value)
    assert str(tmp_path / "pai.toml") in message  # names the file
    return message


AGENT = '[agents.helper]\nmodel = "offline"\n'


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            'default_agnt = "a"\n',
            "(top level) default_agnt: unknown key (did you mean default_agent?)",
        ),
        (
            "[runner]\nconcurency = 4\n",
            "[runner] concurency: unknown key (did you mean concurrency?)",
        ),
        ("[auth]\ntoken = {}\n", "[auth] token: unknown key (did you mean tokens?)"),
        ("[offline]\ndelay = 1\n", "[offline] delay: unknown key"),
        ("[memory]\ncontext_cache = 1\n", "[memory] context_cache: unknown key (did you mean"),
        ("[hook_host]\nadress = 'x'\n", "[hook_host] adress: unknown key (did you mean address?)"),
        (
            "[agents.default]\nmax_step = 2\n",
            "[agents.default] max_step: unknown key (did you mean max_steps?)",
        ),
        (
            AGENT + "model_settings = { temprature = 0.1 }\n",
            "[agents.helper.model_settings] temprature: unknown key (did you mean temperature?)",
        ),
        (
            AGENT + "[agents.helper.contract]\nthread_meta = {}\n",
            "[agents.helper.contract] thread_meta: unknown key",
        ),
        ("[tools.pick]\ndescripton = 'x'\n", "[tools.pick] descripton: unknown key (did you mean"),
        (
            "[tool_servers.web]\naddress = '127.0.0.1:1'\napprove = []\n",
            "[tool_servers.web] approve: unknown key (did you mean approval?)",
        ),
    ],
)
def test_an_unknown_key_in_any_table_is_refused(tmp_path: Path, body: str, expected: str) -> None:
    assert expected in refused(tmp_path, body)


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ('kind = "quota"\nmax_runs = 3\nmax_run = 2', "(quota) max_run: unknown key"),
        ('kind = "recent_window"\nmesages = 4', "(recent_window) mesages: unknown key"),
        ('kind = "compaction"\nkeep = 3', "(compaction) keep: unknown key"),
        ('kind = "redact_secrets"\nreplace = "x"', "(redact_secrets) replace: unknown key"),
        ('kind = "model_fallback"\nmodel = "offline"\nreason = []', "(model_fallback) reason:"),
        ('kind = "python"\nref = "m:a"\noption = {}', "(python) option: unknown key"),
        ('kind = "plugin"\naddress = "x:1"\nretries = 3', "(plugin) retries: unknown key"),
        (
            'kind = "plugin"\naddress = "x:1"\nphases = { prepare_run = { timeout = 3 } }',
            "(plugin) phases.prepare_run.timeout: unknown key (did you mean timeout_ms?)",
        ),
        (
            'kind = "plugin"\naddress = "x:1"\nphases = { prepare_rn = { timeout_ms = 3 } }',
            "(plugin) phases.prepare_rn: unknown key",
        ),
        ('kind = "nope"', "[[agents.helper.lifecycle]] #1 kind: unknown kind 'nope'"),
    ],
)
def test_an_unknown_key_in_a_lifecycle_entry_is_refused(
    tmp_path: Path, entry: str, expected: str
) -> None:
    message = refused(tmp_path, AGENT + f"\n[[agents.helper.lifecycle]]\n{entry}\n")
    assert "[[agents.helper.lifecycle]] #1" in message
    assert expected in message


def test_a_phase_table_written_as_a_table_is_checked_too(tmp_path: Path) -> None:
    message = refused(
        tmp_path,
        AGENT
        + '\n[[agents.helper.lifecycle]]\nkind = "quota"\nmax_runs = 1\n'
        + '\n[[agents.helper.lifecycle]]\nkind = "plugin"\naddress = "x:1"\n'
        + "\n[agents.helper.lifecycle.phases.after_step]\nfailure = 'open'\n",
    )
    assert (
        "[[agents.helper.lifecycle]] #2 (plugin) phases.after_step.failure: unknown key "
        "(did you mean failure_mode?)" in message
    )


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "[runner]\nconcurrency = '4'\n",
            "[runner] concurrency: expected an integer, got a string",
        ),
        (
            "[runner]\nlease_seconds = 'x'\n",
            "[runner] lease_seconds: expected a number, got a string",
        ),
        ("[runner]\nconcurrency = 0\n", "[runner] concurrency: Input should be greater than"),
        ("runner = 3\n", "(top level) runner: expected a table, got an integer"),
        (
            "[agents.a]\nmax_steps = true\n",
            "[agents.a] max_steps: expected an integer, got a boolean",
        ),
        ("[agents.a]\ntools = 'pick'\n", "[agents.a] tools: expected an array, got a string"),
        (
            "[agents.a]\ntools = ['a', 1]\n",
            "[agents.a] tools[1]: expected a string, got an integer",
        ),
        ("[auth.tokens]\nsecret = ''\n", "[auth.tokens] secret: String should have at least"),
        ('[tools.t]\nkind = "backend"\n', "[tools.t] kind: kind 'backend': config declares client"),
        ("[tool_servers.s]\ntimeout = 1\n", "[tool_servers.s] address: required key is missing"),
        (
            AGENT + '[[agents.helper.lifecycle]]\nkind = "plugin"\naddress = "x:1"\n'
            'failure_mode = "opne"\n',
            "(plugin) failure_mode: 'opne' is not allowed (did you mean open?); "
            "use 'closed' or 'open'",
        ),
        (
            AGENT + '[[agents.helper.lifecycle]]\nkind = "plugin"\naddress = "x:1"\n'
            "timeout_ms = '5s'\n",
            "(plugin) timeout_ms: expected a number, got a string",
        ),
        (
            AGENT + '[[agents.helper.lifecycle]]\nkind = "quota"\n',
            "(quota) max_runs: required key is missing",
        ),
    ],
)
def test_a_value_of_the_wrong_type_is_refused(tmp_path: Path, body: str, expected: str) -> None:
    assert expected in refused(tmp_path, body)


def test_every_error_is_reported_at_once(tmp_path: Path) -> None:
    message = refused(tmp_path, "[runner]\nconcurency = 4\n[agents.a]\nmax_step = 2\n")
    assert "concurency" in message
    assert "max_step" in message


def test_accepted_configs_load_into_settings(tmp_path: Path) -> None:
    settings = load(
        tmp_path,
        """
default_agent = "a"
[auth.tokens]
"alice-secret" = "tenant-a"
[auth.admin_tokens]
"ops-secret" = "tenant-a"
[runner]
concurrency = 4
lease_seconds = 2      # an integer where a number is expected is fine
[memory]
run_event_buffer_bytes = 4096
[agents.a]
max_steps = 2
""",
    )
    assert settings.tokens == {"alice-secret": "tenant-a"}
    assert settings.admin_tokens == {"ops-secret": "tenant-a"}
    assert (settings.runner_concurrency, settings.lease_seconds) == (4, 2.0)
    assert settings.grace_seconds == 10.0  # unset keys keep the settings' values
    assert settings.offline_chunk_delay == 0  # ... including explicit overrides
    assert settings.run_event_buffer_bytes == 4096
    assert settings.context_cache_bytes == 67108864
    assert settings.file.agents["a"].max_steps == 2


def test_the_config_mirrors_the_runtime_it_configures() -> None:
    from pai_grpc import _config_file as cf
    from pai_grpc.domain import ModelSettings
    from pai_grpc.lifecycle import (
        AgentLifecycle,
        ContextCompactor,
        ModelFallback,
        Quota,
        RecentWindow,
        RedactSecrets,
    )
    from pai_grpc.lifecycle.internal import PHASES
    from pai_grpc.plugins import PluginConfig

    assert cf.PhaseName.__args__ == PHASES  # type: ignore[attr-defined]
    assert set(cf.ModelSettingsTable.model_fields) == set(ModelSettings.model_fields)
    assert cf.PluginHook.model_fields["timeout_ms"].default == PluginConfig.timeout * 1000
    # The reference shows the built-ins' real defaults.
    mirrors: list[tuple[type[BaseModel], type[AgentLifecycle]]] = [
        (cf.QuotaHook, Quota),
        (cf.RecentWindowHook, RecentWindow),
        (cf.CompactionHook, ContextCompactor),
        (cf.RedactSecretsHook, RedactSecrets),
        (cf.ModelFallbackHook, ModelFallback),
    ]
    for table, hook in mirrors:
        params = inspect.signature(hook).parameters
        for name, field in table.model_fields.items():
            if name not in params or name == "model":
                continue
            if field.is_required():
                assert params[name].default is inspect.Parameter.empty, (hook, name)
            elif field.default is not None:
                assert field.default == params[name].default, (hook, name)


# ---- plugin phase overrides inherit the plugin's policy ------------------------


async def test_phase_overrides_inherit_the_plugins_timeout_and_failure_mode(
    tmp_path: Path, database_url: str
) -> None:
    from pai_grpc._agents_setup import load_agents
    from pai_grpc.lifecycle.internal import ComposedLifecycle
    from pai_grpc.plugins import PhasePolicy, RemoteLifecycle
    from pai_grpc.testing import serve_in_process
    from tests.plugins.fakes import Behaviour, serve_fake
    from tests.plugins.test_failure_policy import failures, run_once

    fake = await serve_fake(Behaviour(prepare_run="wrong"))
    settings = load(
        tmp_path,
        AGENT + f'\n[[agents.helper.lifecycle]]\nkind = "plugin"\naddress = "{fake.address}"\n'
        'timeout_ms = 50\nfailure_mode = "open"\n'
        "phases = { prepare_run = { timeout_ms = 800 }, "
        'around_model_call = { failure_mode = "closed" } }\n',
    )
    agents, opened = await load_agents(settings)
    try:
        lifecycle = agents.resolve("helper").lifecycle
        assert isinstance(lifecycle, ComposedLifecycle)
        (remote,) = lifecycle.parts
        assert isinstance(remote, RemoteLifecycle)
        assert remote.policy("prepare_run") == PhasePolicy(timeout=0.8, failure_mode="open")
        assert remote.policy("around_model_call") == PhasePolicy(0.05, "closed")
        assert remote.policy("prepare_model_step") == PhasePolicy(0.05, "open")
        # Behaviourally: prepare_run answers a malformed reply, a plugin failure that the
        # inherited failure_mode "open" skips and counts instead of failing the run.
        async with serve_in_process(database_url, agents=agents) as srv:
            run, _ = await run_once(srv)
        assert run.status == runs_pb2.RUN_STATUS_COMPLETED
        # Skipped once, and counted once (the count is part of the claim).
        assert [(p, r, n) for _, p, r, n in failures(run)] == [
            ("prepare_run", "HOOK_PROTOCOL_ERROR", 1)
        ]
    finally:
        for item in reversed(opened):
            await item.close()
        await fake.stop()


# ---- the command line ---------------------------------------------------------


@pytest.mark.slow
def test_serve_with_a_bad_config_exits_non_zero_naming_the_mistake(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[agents.default]\nmodel = "offline"\nmax_step = 2\n')
    env = dict(os.environ)
    env.pop("ANTHROPIC_API_KEY", None)
    env.pop("PAI_CONFIG", None)
    env["PAI_DATABASE_URL"] = f"sqlite:///{tmp_path / 'cli.db'}"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        # The timeout is a safety net: before the fix ``serve`` starts and keeps serving.
        return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=60)

    migrated = cli("migrate")
    assert migrated.returncode == 0, migrated.stderr  # so only the config can stop serve
    expected = f"{config}: [agents.default] max_step: unknown key (did you mean max_steps?)"
    for command in (["serve", "--address", "127.0.0.1:0"], ["runner"], ["migrate"]):
        result = cli(*command, "--config", str(config))
        assert result.returncode == 2, (command, result.stderr)
        assert expected in result.stderr, (command, result.stderr)


# ---- the generated reference ---------------------------------------------------


def test_the_configuration_reference_is_fresh() -> None:
    from pai_grpc.config import REFERENCE_END, REFERENCE_START, config_reference

    text = REFERENCE.read_text()
    assert REFERENCE_START in text, "docs/configuration.md lacks the reference block"
    assert REFERENCE_END in text, "docs/configuration.md lacks the reference block"
    block = text.split(REFERENCE_START, 1)[1].split(REFERENCE_END, 1)[0]
    assert block.strip() == config_reference().strip(), (
        "docs/configuration.md's reference is stale: run "
        "`python -m pai_grpc.config --reference --write docs/configuration.md`"
    )


def test_the_reference_names_every_key() -> None:
    from pai_grpc._config_file import ConfigFile, PluginHook, PythonHook
    from pai_grpc.config import config_reference

    reference = config_reference()
    for model in (ConfigFile, PluginHook, PythonHook):
        for name, field in model.model_fields.items():
            if name != "kind":
                assert f"| `{name}` |" in reference
                assert field.description, f"{model.__name__}.{name} has no meaning"
