"""Fluent builders of Kueue manifests for tests, in the style of Kueue's testing wrappers.

Each builder produces the plain dict a batch admin would write in YAML, so tests
exercise the same path as ``kueuelog simulate``: manifest -> validation ->
normalised object -> fold -> cycles.

    a_cluster_queue("cq").cohort("all").flavor("default", cpu="9", memory="36Gi")
    a_workload("team-a", "w1").queue("lq").request(cpu="2").priority(10)
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from events.manifests import Document, normalize
from events.messages import ObjectApplied
from services.app.simulate import SimulationResult, run
from services.core.state import State, WorkloadRecord, fold

V1 = "kueue.x-k8s.io/v1beta1"


class Builder:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self.body)


def _quota(name: str, value: Any, borrowing: Any = None, lending: Any = None) -> dict[str, Any]:
    q: dict[str, Any] = {"name": name, "nominalQuota": value}
    if borrowing is not None:
        q["borrowingLimit"] = borrowing
    if lending is not None:
        q["lendingLimit"] = lending
    return q


class ResourceFlavorBuilder(Builder):
    def labels(self, **labels: str) -> ResourceFlavorBuilder:
        self.body["spec"].setdefault("nodeLabels", {}).update(labels)
        return self

    def taint(self, key: str, value: str, effect: str = "NoSchedule") -> ResourceFlavorBuilder:
        self.body["spec"].setdefault("nodeTaints", []).append({"key": key, "value": value, "effect": effect})
        return self

    def toleration(self, key: str, value: str, effect: str = "NoSchedule") -> ResourceFlavorBuilder:
        self.body["spec"].setdefault("tolerations", []).append(
            {"key": key, "operator": "Equal", "value": value, "effect": effect})
        return self


def a_flavor(name: str) -> ResourceFlavorBuilder:
    return ResourceFlavorBuilder({"apiVersion": V1, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": {}})


class _QuotaOwner(Builder):
    def group(self, *flavors: tuple[str, dict[str, Any]]) -> Any:
        """A resource group: ``("flavor", {"cpu": "9" | ("9", borrowing, lending)})`` ..."""
        covered: list[str] = []
        out_flavors = []
        for flavor, resources in flavors:
            res_list = []
            for res, value in resources.items():
                if res not in covered:
                    covered.append(res)
                if isinstance(value, tuple):
                    res_list.append(_quota(res, *value))
                else:
                    res_list.append(_quota(res, value))
            out_flavors.append({"name": flavor, "resources": res_list})
        self.body["spec"].setdefault("resourceGroups", []).append(
            {"coveredResources": covered, "flavors": out_flavors})
        return self

    def flavor(self, name: str, **resources: Any) -> Any:
        """A resource group with a single flavor; ``cpu=("9", borrowingLimit, lendingLimit)`` sets limits.
        Resource names with dots or slashes go through ``group``."""
        return self.group((name, resources))

    def weight(self, weight: Any) -> Any:
        self.body["spec"]["fairSharing"] = {"weight": weight}
        return self


class ClusterQueueBuilder(_QuotaOwner):
    def cohort(self, name: str) -> ClusterQueueBuilder:
        self.body["spec"]["cohort"] = name
        return self

    def strict_fifo(self) -> ClusterQueueBuilder:
        self.body["spec"]["queueingStrategy"] = "StrictFIFO"
        return self

    def selector(self, selector: dict[str, Any] | None) -> ClusterQueueBuilder:
        if selector is None:
            self.body["spec"].pop("namespaceSelector", None)
        else:
            self.body["spec"]["namespaceSelector"] = selector
        return self

    def preemption(self, within: str | None = None, reclaim: str | None = None,
                   borrow: str | None = None, threshold: int | None = None) -> ClusterQueueBuilder:
        p: dict[str, Any] = {}
        if within:
            p["withinClusterQueue"] = within
        if reclaim:
            p["reclaimWithinCohort"] = reclaim
        if borrow:
            p["borrowWithinCohort"] = {"policy": borrow}
            if threshold is not None:
                p["borrowWithinCohort"]["maxPriorityThreshold"] = threshold
        self.body["spec"]["preemption"] = p
        return self

    def fungibility(self, when_can_borrow: str | None = None, when_can_preempt: str | None = None,
                    preference: str | None = None) -> ClusterQueueBuilder:
        f: dict[str, Any] = {}
        if when_can_borrow:
            f["whenCanBorrow"] = when_can_borrow
        if when_can_preempt:
            f["whenCanPreempt"] = when_can_preempt
        if preference:
            f["preference"] = preference
        self.body["spec"]["flavorFungibility"] = f
        return self

    def stop(self, policy: str) -> ClusterQueueBuilder:
        self.body["spec"]["stopPolicy"] = policy
        return self

    def admission_checks(self, *names: str) -> ClusterQueueBuilder:
        self.body["spec"]["admissionChecks"] = list(names)
        return self

    def admission_fair_sharing(self) -> ClusterQueueBuilder:
        self.body["spec"]["admissionScope"] = {"admissionMode": "UsageBasedAdmissionFairSharing"}
        return self


def a_cluster_queue(name: str) -> ClusterQueueBuilder:
    return ClusterQueueBuilder({"apiVersion": V1, "kind": "ClusterQueue", "metadata": {"name": name},
                                "spec": {"namespaceSelector": {}}})


class CohortBuilder(_QuotaOwner):
    def parent(self, name: str) -> CohortBuilder:
        self.body["spec"]["parentName"] = name
        return self


def a_cohort(name: str) -> CohortBuilder:
    return CohortBuilder({"apiVersion": V1, "kind": "Cohort", "metadata": {"name": name}, "spec": {}})


class LocalQueueBuilder(Builder):
    def stop(self, policy: str) -> LocalQueueBuilder:
        self.body["spec"]["stopPolicy"] = policy
        return self

    def weight(self, weight: Any) -> LocalQueueBuilder:
        self.body["spec"]["fairSharing"] = {"weight": weight}
        return self

    def consumed(self, **resources: Any) -> LocalQueueBuilder:
        """status.fairSharing.admissionFairSharingStatus.consumedResources: a usage history."""
        self.body["status"] = {"fairSharing": {"admissionFairSharingStatus": {
            "consumedResources": {k: str(v) for k, v in resources.items()}}}}
        return self


def a_local_queue(namespace: str, name: str, cluster_queue: str) -> LocalQueueBuilder:
    return LocalQueueBuilder({"apiVersion": V1, "kind": "LocalQueue",
                              "metadata": {"name": name, "namespace": namespace},
                              "spec": {"clusterQueue": cluster_queue}})


def a_namespace(name: str, **labels: str) -> Builder:
    return Builder({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})


def a_priority_class(name: str, value: int, *, workload: bool = True) -> Builder:
    if workload:
        return Builder({"apiVersion": V1, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value})
    return Builder({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                    "value": value})


class ConfigurationBuilder(Builder):
    def fair_sharing(self) -> ConfigurationBuilder:
        self.body["fairSharing"] = {"enable": True}
        return self

    def wait_for_pods_ready(self, **fields: Any) -> ConfigurationBuilder:
        """waitForPodsReady, on (``enable: true``), with these fields (camelCase)."""
        self.body["waitForPodsReady"] = {"enable": True, **fields}
        return self

    def admission_fair_sharing(self, **fields: Any) -> ConfigurationBuilder:
        """admissionFairSharing with these fields (camelCase): the block turns it on."""
        self.body["admissionFairSharing"] = dict(fields)
        return self

    def feature_gate(self, name: str, enabled: bool) -> ConfigurationBuilder:
        self.body.setdefault("featureGates", {})[name] = enabled
        return self


def a_configuration() -> ConfigurationBuilder:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta1)."""
    return ConfigurationBuilder({"apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration"})


class WorkloadBuilder(Builder):
    def queue(self, name: str) -> WorkloadBuilder:
        self.body["spec"]["queueName"] = name
        return self

    def label(self, key: str, value: str) -> WorkloadBuilder:
        self.body["metadata"].setdefault("labels", {})[key] = value
        return self

    def priority(self, value: int) -> WorkloadBuilder:
        self.body["spec"]["priority"] = value
        return self

    def priority_class(self, name: str) -> WorkloadBuilder:
        self.body["spec"]["priorityClassName"] = name
        self.body["spec"]["priorityClassSource"] = "kueue.x-k8s.io/workloadpriorityclass"
        return self

    def max_exec(self, seconds: int) -> WorkloadBuilder:
        """spec.maximumExecutionTimeSeconds."""
        self.body["spec"]["maximumExecutionTimeSeconds"] = seconds
        return self

    def active(self, value: bool) -> WorkloadBuilder:
        """spec.active: false deactivates the workload."""
        self.body["spec"]["active"] = value
        return self

    def elastic(self) -> WorkloadBuilder:
        """Annotated kueue.x-k8s.io/elastic-job: "true" (ElasticJobsViaWorkloadSlices)."""
        self.body["metadata"].setdefault("annotations", {})["kueue.x-k8s.io/elastic-job"] = "true"
        return self

    def replaces(self, key: str) -> WorkloadBuilder:
        """A workload slice replacing ``key`` (namespace/name) once admitted."""
        self.body["metadata"].setdefault("annotations", {})["kueue.x-k8s.io/workload-slice-replacement-for"] = key
        return self

    def created(self, seconds: int) -> WorkloadBuilder:
        """creationTimestamp as seconds after 2025-01-01T00:00:00Z."""
        h, rem = divmod(seconds, 3600)
        m, s = divmod(rem, 60)
        self.body["metadata"]["creationTimestamp"] = f"2025-01-01T{h:02d}:{m:02d}:{s:02d}Z"
        return self

    def pod_set(self, name: str = "main", count: int = 1, min_count: int | None = None,
                node_selector: dict[str, str] | None = None, tolerations: list[dict[str, str]] | None = None,
                **requests: Any) -> WorkloadBuilder:
        spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": _res(requests)}}]}
        if node_selector:
            spec["nodeSelector"] = node_selector
        if tolerations:
            spec["tolerations"] = tolerations
        ps: dict[str, Any] = {"name": name, "count": count, "template": {"spec": spec}}
        if min_count is not None:
            ps["minCount"] = min_count
        self.body["spec"].setdefault("podSets", []).append(ps)
        return self

    def request(self, count: int = 1, **requests: Any) -> WorkloadBuilder:
        return self.pod_set("main", count, **requests)

    def limits(self, **limits: Any) -> WorkloadBuilder:
        """Limits for the first container of the last podSet."""
        container = self.body["spec"]["podSets"][-1]["template"]["spec"]["containers"][0]
        container["resources"]["limits"] = _res(limits)
        return self

    def container(self, requests: dict[str, Any], limits: dict[str, Any] | None = None, *,
                  init: bool = False) -> WorkloadBuilder:
        """One more container (or init container) in the last podSet."""
        resources: dict[str, Any] = {"requests": _res(requests)}
        if limits is not None:
            resources["limits"] = _res(limits)
        spec = self.body["spec"]["podSets"][-1]["template"]["spec"]
        key = "initContainers" if init else "containers"
        spec.setdefault(key, []).append({"name": f"c{len(spec.get(key, []))}", "resources": resources})
        return self

    def admitted(self, cluster_queue: str, flavors: dict[str, str], at_seconds: int = 0) -> WorkloadBuilder:
        """Arrives already holding quota (status.admission + QuotaReserved=True)."""
        ps = self.body["spec"]["podSets"]
        h, rem = divmod(at_seconds, 3600)
        m, s = divmod(rem, 60)
        t = f"2025-01-01T{h:02d}:{m:02d}:{s:02d}Z"
        self.body["status"] = {
            "admission": {"clusterQueue": cluster_queue, "podSetAssignments": [
                {"name": p["name"], "flavors": flavors, "count": p["count"]} for p in ps]},
            "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                            "message": "", "lastTransitionTime": t}],
        }
        return self


    def evicted(self, reason: str = "Preempted", at_seconds: int = 0) -> WorkloadBuilder:
        """Being evicted (Evicted=True) while still holding the quota ``admitted`` gave it."""
        h, rem = divmod(at_seconds, 3600)
        m, s = divmod(rem, 60)
        self.body["status"]["conditions"].append(
            {"type": "Evicted", "status": "True", "reason": reason, "message": f"evicted: {reason}",
             "lastTransitionTime": f"2025-01-01T{h:02d}:{m:02d}:{s:02d}Z"})
        return self


def _res(requests: dict[str, Any]) -> dict[str, Any]:
    return {k.replace("__", "/").replace("_", "."): v for k, v in requests.items()}


def a_workload(namespace: str, name: str) -> WorkloadBuilder:
    return WorkloadBuilder({"apiVersion": V1, "kind": "Workload",
                            "metadata": {"name": name, "namespace": namespace, "uid": name}, "spec": {}})


class JobBuilder(Builder):
    def parallelism(self, n: int, completions: int | None = None) -> JobBuilder:
        self.body["spec"]["parallelism"] = n
        if completions is not None:
            self.body["spec"]["completions"] = completions
        return self

    def request(self, **requests: Any) -> JobBuilder:
        self.body["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": _res(requests)}
        return self

    def limits(self, **limits: Any) -> JobBuilder:
        self.body["spec"]["template"]["spec"]["containers"][0].setdefault("resources", {})["limits"] = _res(limits)
        return self

    def label(self, key: str, value: str) -> JobBuilder:
        self.body["metadata"].setdefault("labels", {})[key] = value
        return self

    def annotate(self, key: str, value: str) -> JobBuilder:
        self.body["metadata"].setdefault("annotations", {})[key] = value
        return self

    def created(self, seconds: int) -> JobBuilder:
        h, rem = divmod(seconds, 3600)
        m, s = divmod(rem, 60)
        self.body["metadata"]["creationTimestamp"] = f"2025-01-01T{h:02d}:{m:02d}:{s:02d}Z"
        return self


def a_job(namespace: str, name: str, queue: str | None) -> JobBuilder:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue is not None else {}
    return JobBuilder({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never",
                                                        "containers": [{"name": "main", "image": "busybox"}]}}},
    })


# --- running ---------------------------------------------------------------------------------


def build_state(*objects: Builder | dict[str, Any]) -> State:
    state = State()
    for i, b in enumerate(objects, start=1):
        body = b.obj() if isinstance(b, Builder) else b
        obj = normalize(Document("test.yaml", i, body))
        if obj is not None:
            fold(state, ObjectApplied(time=getattr(obj, "creation_time", None) or 0, object=obj))
    return state


@dataclass
class Outcome:
    result: SimulationResult

    @property
    def state(self) -> State:
        return self.result.state

    def wl(self, key: str) -> WorkloadRecord:
        """A workload by ``ns/name``, or by ``ns/job-name`` for workloads made from Jobs."""
        if key in self.state.workloads:
            return self.state.workloads[key]
        ns, name = key.split("/", 1)
        for rec in self.state.workloads.values():
            if rec.obj.namespace == ns and rec.obj.owner is not None and rec.obj.owner.name == name:
                return rec
        raise KeyError(key)

    def admitted(self) -> dict[str, str]:
        """``ns/name`` -> ClusterQueue of every workload holding quota (not being evicted)."""
        return {k: r.admission.cluster_queue for k, r in sorted(self.state.workloads.items())
                if r.admission is not None and not r.evicting}

    def flavors(self, key: str) -> dict[str, str]:
        rec = self.wl(key)
        assert rec.admission is not None, f"{key} is not admitted"
        out: dict[str, str] = {}
        for psa in rec.admission.pod_set_assignments:
            out.update({f"{psa.name}/{r}" if len(rec.admission.pod_set_assignments) > 1 else r: f
                        for r, f in psa.flavors})
        return out

    def preempted(self) -> list[str]:
        return sorted(k for k, r in self.state.workloads.items()
                      if (c := r.conditions.get("Preempted")) is not None and c.status == "True")

    def message(self, key: str) -> str:
        c = self.wl(key).conditions.get("QuotaReserved")
        return c.message if c is not None else ""

    def condition(self, key: str, ctype: str) -> tuple[str, str] | None:
        c = self.wl(key).conditions.get(ctype)
        return (c.status, c.reason) if c is not None else None


def simulate(*objects: Builder | dict[str, Any], cycles: int | None = None) -> Outcome:
    return Outcome(run(build_state(*objects), cycles))
