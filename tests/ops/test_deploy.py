"""The Kubernetes manifests and the Dockerfile agree with how ctxd runs, pass
schema validation and meet Pod Security "restricted"."""

from __future__ import annotations

import importlib.util
import re
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


def test_there_are_the_lmdb_and_s3_overlays_over_one_base():
    assert [o.name for o in OVERLAYS] == ["lmdb", "s3"]
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


def test_minimum_kubernetes_version_is_stated():
    for path in [KUBE / "base" / "agent.yaml", *(o / "kustomization.yaml" for o in OVERLAYS)]:
        assert re.search(r"Kubernetes 1\.28\+|Kubernetes version: 1\.28", path.read_text()), path
    assert "Kubernetes 1.28" in (ROOT / "README.md").read_text()


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
