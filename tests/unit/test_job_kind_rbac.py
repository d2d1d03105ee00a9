"""``deploy/jobkinds/rbac.yaml`` is generated from the registry of workload kinds
(``events.jobkinds.rbac``): every kind the watcher can be asked to watch is listed and watched,
nothing more. Regenerate: ``python -m tests.unit.test_job_kind_rbac``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from events import jobkinds
from events.jobkinds.rbac import POD_RULES, manifests

ROOT = Path(__file__).resolve().parents[2]
FILE = ROOT / "deploy" / "jobkinds" / "rbac.yaml"
HEADER = ("# Generated from events/jobkinds (python -m tests.unit.test_job_kind_rbac); do not edit.\n"
          "# The watcher and the actuator with --job-kinds: the workload kinds besides Job.\n")


def render() -> str:
    return HEADER + yaml.safe_dump_all(manifests(), sort_keys=False, default_flow_style=None)


def test_the_committed_rbac_is_the_generated_one() -> None:
    assert FILE.read_text(encoding="utf-8") == render()


@pytest.mark.parametrize(("service", "verbs"), [("watcher", ("list", "watch")),
                                               ("actuator", ("get", "list", "watch", "patch"))])
def test_every_kind_granted_exactly_the_services_verbs(service: str, verbs: tuple[str, ...]) -> None:
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(FILE.read_text(encoding="utf-8"))}
    role = docs[("ClusterRole", f"kueuelog-{service}-job-kinds")]
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    pod_integration = {(g, r, v) for rule in POD_RULES for g in rule["apiGroups"] for r in rule["resources"]
                       for v in rule["verbs"]} if service == "actuator" else set()
    runtimes = {("trainer.kubeflow.org", r, v) for r in ("clustertrainingruntimes", "trainingruntimes")
                for v in (("list", "watch") if service == "watcher" else ("get",))}
    assert granted == ({(k.group, k.plural, v) for k in jobkinds.OTHER_KINDS for v in verbs} | pod_integration
                       | runtimes)
    binding = docs[("ClusterRoleBinding", f"kueuelog-{service}-job-kinds")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": f"kueuelog-{service}",
                                    "namespace": "kueuelog-system"}]


def test_kustomization_lists_the_file() -> None:
    kustomization = yaml.safe_load((FILE.parent / "kustomization.yaml").read_text(encoding="utf-8"))
    assert kustomization["resources"] == ["rbac.yaml"]


if __name__ == "__main__":
    FILE.parent.mkdir(parents=True, exist_ok=True)
    FILE.write_text(render(), encoding="utf-8")
    print(f"wrote {FILE.relative_to(ROOT)}")
