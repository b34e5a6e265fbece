"""The Kubernetes manifests and the Dockerfile agree with how ctxd runs, pass
schema validation and meet Pod Security "restricted"."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from ctxd_sidecar.config.loader import load_config

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
OVERLAYS = sorted(p.parent for p in (KUBE / "overlays").glob("*/kustomization.yaml"))
#: The oldest Kubernetes the manifests support (native sidecars) and the newest schema bundled.
VERSIONS = ["1.28.0", kubernetes_validate.latest_version()]
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
    "persistentVolumeClaim", "projected", "secret",
}  # fmt: skip


def _compose_module():
    spec = importlib.util.spec_from_file_location("compose", KUBE / "compose.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


compose = _compose_module().compose


def _composed() -> list[tuple[str, dict]]:
    return [(o.name, doc) for o in OVERLAYS for doc in compose(o)]


def _resource_files() -> list[Path]:
    """Every YAML file that is a whole resource (not a kustomization or a patch)."""
    out = []
    for path in sorted(KUBE.rglob("*.yaml")):
        if path.name == "kustomization.yaml" or path.name.endswith("-patch.yaml"):
            continue
        out.append(path)
    return out


def _pod_specs(docs):
    for doc in docs:
        if doc and doc["kind"] in {"Deployment", "StatefulSet"}:
            yield doc["spec"]["template"]


def test_there_are_the_lmdb_postgres_and_s3_overlays_over_one_base():
    assert [o.name for o in OVERLAYS] == ["lmdb", "postgres", "s3"]
    for overlay in OVERLAYS:
        spec = yaml.safe_load((overlay / "kustomization.yaml").read_text())
        assert "../../base" in spec["resources"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", _resource_files(), ids=lambda p: str(p.relative_to(KUBE)))
def test_every_resource_file_validates(path, version):
    for doc in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_every_composed_overlay_validates(overlay, version):
    docs = compose(overlay)
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_overlay_runs_ctxd_as_a_native_sidecar_with_grpc_probes(overlay):
    templates = list(_pod_specs(compose(overlay)))
    assert templates
    for template in templates:
        spec = template["spec"]
        (ctxd,) = [c for c in spec["initContainers"] if c["name"] == "ctxd"]
        assert ctxd["restartPolicy"] == "Always"
        env = {e["name"]: e["value"] for e in ctxd["env"] if "value" in e}
        cfg = load_config(env=env)  # the manifest's settings are valid ctxd config
        assert cfg.store.startswith(overlay.name)
        port = int(cfg.listen.rsplit(":", 1)[1])
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert ctxd[probe]["grpc"]["port"] == port
        # The pod must outlive ctxd's drain.
        assert spec["terminationGracePeriodSeconds"] > cfg.grace_seconds
        # Prometheus scrapes the metrics port ctxd listens on.
        metrics_port = int(cfg.metrics_listen.rsplit(":", 1)[1])
        notes = template["metadata"]["annotations"]
        assert notes["prometheus.io/scrape"] == "true"
        assert int(notes["prometheus.io/port"]) == metrics_port
        assert metrics_port in {p["containerPort"] for p in ctxd["ports"]}


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_pods_meet_pod_security_restricted(overlay):
    for template in _pod_specs(compose(overlay)):
        spec = template["spec"]
        pod_sc = spec.get("securityContext", {})
        for flag in ("hostNetwork", "hostPID", "hostIPC"):
            assert not spec.get(flag)
        for volume in spec.get("volumes", []):
            assert set(volume) - {"name"} <= RESTRICTED_VOLUMES, volume
        containers = spec.get("initContainers", []) + spec["containers"]
        for c in containers:
            sc = c.get("securityContext", {})
            assert sc.get("allowPrivilegeEscalation") is False, c["name"]
            assert not sc.get("privileged"), c["name"]
            assert sc["capabilities"]["drop"] == ["ALL"], c["name"]
            assert set(sc["capabilities"].get("add", [])) <= {"NET_BIND_SERVICE"}
            assert sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True, c["name"]
            assert sc.get("runAsUser", pod_sc.get("runAsUser", 1)) != 0
            seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {}))
            assert seccomp.get("type") in {"RuntimeDefault", "Localhost"}, c["name"]
            assert sc.get("readOnlyRootFilesystem") is True, c["name"]
            assert all("hostPort" not in p for p in c.get("ports", []))


def test_s3_network_policy_admits_the_agent_and_keeps_ctxd_private():
    docs = compose(KUBE / "overlays" / "s3")
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    (template,) = _pod_specs(docs)
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= (
        template["metadata"]["labels"].items()
    )
    spec = template["spec"]
    (ctxd,) = [c for c in spec["initContainers"] if c["name"] == "ctxd"]
    (agent,) = [c for c in spec["containers"] if c["name"] == "agent"]
    open_ports = {}
    for rule in policy["spec"]["ingress"]:
        for port in rule.get("ports", []):
            open_ports[port["port"]] = rule.get("from")
    assert "ports" in str(policy["spec"]["ingress"])  # no rule opens every port
    for port in agent["ports"]:
        assert port["containerPort"] in open_ports  # the agent still gets its traffic
    grpc_port = next(p["containerPort"] for p in ctxd["ports"] if p["name"] == "grpc")
    assert grpc_port not in open_ports  # ctxd is reachable from the pod only
    metrics = next(p["containerPort"] for p in ctxd["ports"] if p["name"] == "metrics")
    assert open_ports[metrics]  # metrics only from the listed peers
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    egress_ports = {p["port"] for r in policy["spec"]["egress"] for p in r.get("ports", [])}
    assert {53, 443} <= egress_ports  # DNS and S3


def test_postgres_overlay_keeps_the_password_in_a_secret_only():
    from urllib.parse import urlsplit

    docs = compose(KUBE / "overlays" / "postgres")
    assert not [d for d in docs if d["kind"] == "Secret"]  # created outside the manifests
    (template,) = _pod_specs(docs)
    (ctxd,) = [c for c in template["spec"]["initContainers"] if c["name"] == "ctxd"]
    env = {e["name"]: e for e in ctxd["env"]}
    uri = urlsplit(env["CTXD_STORE"]["value"])
    assert uri.scheme == "postgres" and uri.password is None
    assert "sslmode=verify-full" in uri.query
    assert env["PGPASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "ctxd-postgres"
    assert "value" not in env["PGPASSWORD"]
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    egress_ports = {p["port"] for r in policy["spec"]["egress"] for p in r.get("ports", [])}
    assert {53, 5432} <= egress_ports


def test_minimum_kubernetes_version_is_stated():
    for path in [KUBE / "base" / "agent.yaml", *(o / "kustomization.yaml" for o in OVERLAYS)]:
        assert re.search(r"Kubernetes 1\.28\+|Kubernetes version: 1\.28", path.read_text()), path
    assert "Kubernetes 1.28" in (ROOT / "docs" / "operations" / "deployment.md").read_text()


def test_prometheus_scrape_config_keeps_annotated_pods():
    cfg = yaml.safe_load((ROOT / "deploy" / "prometheus" / "scrape-config.yaml").read_text())
    (job,) = cfg["scrape_configs"]
    assert job["kubernetes_sd_configs"] == [{"role": "pod"}]
    keep = job["relabel_configs"][0]
    assert keep["action"] == "keep" and keep["regex"] == "true"
    assert keep["source_labels"] == ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"]


def test_dockerfile_runs_the_sidecar_as_non_root_with_a_data_volume_and_a_healthcheck():
    text = (ROOT / "Dockerfile").read_text()
    assert "USER 10001" in text
    assert 'ENTRYPOINT ["ctxd", "serve"]' in text
    assert 'VOLUME ["/var/lib/ctxd"]' in text
    assert "CTXD_STORE=lmdb:///var/lib/ctxd" in text
    assert re.search(r'HEALTHCHECK .*\\\n\s+CMD \["ctxd", "health"', text)


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def _in_mount(container: dict, path: str) -> tuple[str, str] | None:
    """(volume name, path inside it) when ``path`` lies in one of the container's mounts."""
    for m in container.get("volumeMounts", []):
        if path.startswith(m["mountPath"].rstrip("/") + "/"):
            return m["name"], path[len(m["mountPath"].rstrip("/")) + 1 :]
    return None


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_the_agent_authenticates_with_the_token_file_the_manifests_give_it(
    overlay, spawn_sidecar, tmp_path
):
    """ctxd and the agent read one Secret's file; a client given the agent's
    environment (CTXD_TOKEN_FILE) is let in by a sidecar given ctxd's."""
    (pod,) = [p["spec"] for _n, d in _composed() if _n == overlay.name for p in _pod_specs([d])]
    (ctxd,) = pod["initContainers"]
    agent = next(c for c in pod["containers"] if c["name"] == "agent")
    server_file = _env(ctxd)["CTXD_AUTH_TOKEN_FILE"]
    agent_file = _env(agent)["CTXD_TOKEN_FILE"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    server_at, agent_at = _in_mount(ctxd, server_file), _in_mount(agent, agent_file)
    assert server_at and agent_at and server_at == agent_at  # the same file of the same volume
    assert "secret" in volumes[server_at[0]]  # a Secret, not a file baked into an image

    # The same file on this machine, with the pod's environment mapped onto it.
    secret_dir = tmp_path / "secret"
    secret_dir.mkdir()
    (secret_dir / server_at[1]).write_text("token-from-the-secret\n")
    server_env = {k: v for k, v in _env(ctxd).items() if k.startswith("CTXD_")}
    server_env.pop("CTXD_LISTEN")  # only loopback here
    server_env.pop("CTXD_METRICS_LISTEN", None)
    server_env["CTXD_AUTH_TOKEN_FILE"] = str(secret_dir / server_at[1])
    sidecar = spawn_sidecar("--store", "memory://", env=server_env)
    agent_env = {**_env(agent), "CTXD_ADDRESS": sidecar.address}
    agent_env["CTXD_TOKEN_FILE"] = str(secret_dir / agent_at[1])
    code = (
        "from ctxd_client import Client\n"
        "with Client() as c:\n"
        "    print(c.append_turn('k8s', [{'user': {'text': 'hi'}}]).version)\n"
    )
    base = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT / "clients" / "python")}

    def agent_run(env: dict[str, str]) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", code],
            env={**base, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )

    ok = agent_run(agent_env)
    assert ok.returncode == 0 and ok.stdout.strip() == "1", ok.stderr
    # Without the file the same agent is refused: the file is what lets it in.
    refused = agent_run({k: v for k, v in agent_env.items() if k != "CTXD_TOKEN_FILE"})
    assert refused.returncode != 0 and "UNAUTHENTICATED" in refused.stderr
