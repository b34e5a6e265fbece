"""The Kubernetes manifests and the Dockerfile agree with how ctxd runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sidecar import config

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))


def _pod_specs(path):
    for doc in yaml.safe_load_all(path.read_text()):
        if doc and doc["kind"] in {"Deployment", "StatefulSet"}:
            yield doc["spec"]["template"]["spec"]


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_runs_ctxd_as_a_native_sidecar_with_grpc_probes(path):
    specs = list(_pod_specs(path))
    assert specs
    for spec in specs:
        (ctxd,) = [c for c in spec["initContainers"] if c["name"] == "ctxd"]
        assert ctxd["restartPolicy"] == "Always"
        env = {e["name"]: e["value"] for e in ctxd["env"] if "value" in e}
        cfg = config.load(env=env)  # the manifest's settings are valid ctxd config
        port = int(cfg.listen.rsplit(":", 1)[1])
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert ctxd[probe]["grpc"]["port"] == port
        # The pod must outlive ctxd's drain.
        assert spec["terminationGracePeriodSeconds"] > cfg.grace_seconds
        assert spec["securityContext"]["runAsNonRoot"] is True


def test_dockerfile_runs_the_sidecar_as_non_root_with_a_data_volume():
    text = (ROOT / "Dockerfile").read_text()
    assert "USER 10001" in text
    assert 'ENTRYPOINT ["ctxd", "serve"]' in text
    assert 'VOLUME ["/var/lib/ctxd"]' in text
    assert "CTXD_STORE=lmdb:///var/lib/ctxd" in text
