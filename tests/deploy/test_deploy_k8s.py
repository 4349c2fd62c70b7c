"""The Kubernetes manifests: schema-valid for Kubernetes >= 1.29, wired together, rules that load.

Schemas come from the `kubernetes-validate` package (bundled schemas 1.25 to 1.37 in version 1.37.0);
it is a test dependency, and a missing one fails these tests with the install line.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_files import K8S, load_docs, pod_spec, sidecar, trainer

from alertd.config import load_config
from alertd.errors import ConfigError

VERSIONS = ("1.29.0", "1.33.0")  # 1.29: native sidecars on by default (beta); 1.33: GA


def _kv() -> Any:
    try:
        import kubernetes_validate
    except ImportError:
        pytest.fail("kubernetes-validate is not installed: pip install 'kubernetes-validate>=1.33' (test extra)")
    return kubernetes_validate


def _manifests() -> list[Path]:
    return sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def test_every_manifest_validates_strictly_against_kubernetes_1_29_and_later() -> None:
    kv = _kv()
    docs = [(p.name, d) for p in _manifests() for d in load_docs(p)]
    assert {d["kind"] for _, d in docs} == {"Job", "ConfigMap", "Secret"}
    for name, doc in docs:
        for version in VERSIONS:
            kv.validate(doc, version, strict=True)  # raises ValidationError naming the bad field
        assert name


def test_the_sidecar_field_needs_kubernetes_1_28_so_older_schemas_reject_the_job() -> None:
    kv = _kv()
    (job,) = load_docs(K8S / "job.yaml")
    with pytest.raises(kv.ValidationError, match="restartPolicy"):
        kv.validate(job, "1.27.0", strict=True)


def test_kustomization_lists_every_manifest_and_nothing_else() -> None:
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert sorted(kust["resources"]) == [p.name for p in _manifests()]
    kubectl = shutil.which("kubectl")
    if kubectl is not None:  # kustomize built into kubectl renders it offline: one object per manifest
        out = subprocess.run([kubectl, "kustomize", str(K8S)], capture_output=True, text=True, check=True).stdout
        kinds = sorted(d["kind"] for d in yaml.safe_load_all(out) if d)
        assert kinds == ["ConfigMap", "Job", "Secret"]


def test_alertd_is_a_native_sidecar_sharing_logs_and_processes_with_the_trainer() -> None:
    spec, side, train = pod_spec(), sidecar(), trainer()
    assert side["restartPolicy"] == "Always"
    assert spec["restartPolicy"] == "Never"
    assert spec["shareProcessNamespace"] is True
    mounts = {c["name"]: {m["name"]: m for m in c["volumeMounts"]} for c in (side, train)}
    assert mounts["alertd"]["logs"]["mountPath"] == mounts["trainer"]["logs"]["mountPath"] == "/logs"
    assert mounts["alertd"]["logs"]["readOnly"] is True
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in volumes["logs"] and "emptyDir" in volumes["alertd-state"]
    assert _env(side)["ALERTD_LOGDIR"]["value"] == "/logs"
    state = _env(side)["ALERTD_STATE_DIR"]["value"]
    assert mounts["alertd"]["alertd-state"]["mountPath"] == state
    assert "nvidia.com/gpu" in train["resources"]["limits"]
    assert "nvidia.com/gpu" not in side["resources"].get("limits", {})


def test_both_containers_run_as_one_non_root_uid_without_capabilities() -> None:
    spec, side, train = pod_spec(), sidecar(), trainer()
    assert spec["securityContext"]["runAsNonRoot"] is True
    uids = {c["securityContext"]["runAsUser"] for c in (side, train)}
    assert uids == {spec["securityContext"]["runAsUser"]} and 0 not in uids
    for c in (side, train):
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["runAsNonRoot"] is True
    assert side["securityContext"]["readOnlyRootFilesystem"] is True


def test_probes_ask_health_and_readiness_on_the_listen_port() -> None:
    side = sidecar()
    port = {p["name"]: p["containerPort"] for p in side["ports"]}["http"]
    listen = side["args"][side["args"].index("--listen") + 1]
    assert listen == f"0.0.0.0:{port}"
    assert side["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert side["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert side["startupProbe"]["httpGet"]["path"] == "/healthz"


def test_secrets_come_from_the_example_secret_by_key() -> None:
    (secret,) = load_docs(K8S / "secret.example.yaml")
    refs = {name: e["valueFrom"]["secretKeyRef"] for name, e in _env(sidecar()).items() if "valueFrom" in e}
    assert set(refs) == {"ALERTD_SLACK_URL", "ALERTD_API_TOKEN", "WANDB_API_KEY"}
    for ref in refs.values():
        assert ref["name"] == secret["metadata"]["name"]
        assert ref["key"] in secret["stringData"]
    assert "REPLACE" in secret["stringData"]["slack-url"]  # a placeholder, not a real hook


def _rules_text() -> tuple[dict[str, Any], str]:
    (cm,) = load_docs(K8S / "rules.yaml")
    return cm, cm["data"]["rules.yaml"]


def test_the_rules_configmap_is_mounted_where_the_sidecar_reads_it() -> None:
    cm, _ = _rules_text()
    side, spec = sidecar(), pod_spec()
    rules_path = side["args"][side["args"].index("--rules") + 1]
    (volume,) = [v for v in spec["volumes"] if v.get("configMap", {}).get("name") == cm["metadata"]["name"]]
    (mount,) = [m for m in side["volumeMounts"] if m["name"] == volume["name"]]
    assert rules_path == f"{mount['mountPath']}/rules.yaml"


def test_the_configmap_rules_load_with_the_sidecars_environment(tmp_path: Path) -> None:
    _, text = _rules_text()
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    wanted = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", text))
    assert wanted <= set(_env(sidecar())), f"the sidecar does not set {wanted - set(_env(sidecar()))}"
    env = {"ALERTD_LOGDIR": "/logs", "ALERTD_SLACK_URL": "https://hooks.slack.com/services/T0/B0/XYZ"}
    cfg = load_config([str(path)], env)
    assert {s.type for s in cfg.sources} == {"tensorboard", "nvml"}
    assert {n: c.type for n, c in cfg.notifiers.items()} == {"console": "log", "slack": "webhook", "stop": "kill"}
    assert cfg.notifiers["stop"].target == "writer"
    (critical,) = [r for r in cfg.route.routes if r.match == {"severity": "critical"}]
    assert "stop" in (critical.receivers or [])
    assert "stop" not in (cfg.route.receivers or [])
    with pytest.raises(ConfigError, match="ALERTD_SLACK_URL"):
        load_config([str(path)], {"ALERTD_LOGDIR": "/logs"})
