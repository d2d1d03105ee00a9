"""The admission webhooks against a real kube-apiserver, which calls them on 127.0.0.1.

The webhook service (``services/webhook``) runs in the test's process over HTTPS with a
certificate from ``deploy/webhook/selfsigned.sh --local``; the configurations are those of
``deploy/webhook/webhooks.yaml`` with ``clientConfig`` pointed at it (``url`` and ``caBundle``)
and, so that tests sharing the control plane are not affected, scoped to this test's namespace
(``namespaceSelector``) and to objects labelled for it (``objectSelector``). The control plane
runs no job controller: "no pod ever starts" is read as "the Job is stored suspended", which is
what keeps the job controller from creating pods.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import subprocess
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from events import t9k
from events.cluster import ADMISSION_GATE, ELASTIC_QUOTA_TREE_LABEL
from services.webhook.server import Cluster, application, serve, tls_context
from tests.infra.kube import LocalControlPlane, free_port
from tests.infra.pytest_kube import load_configuration
from tests.integration.kube_deploy import apply_crds, create_or_replace, eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SCOPE = "kueuelog.io/webhook-test"


@dataclass
class Webhooks:
    namespace: str
    scope: str
    api: client.ApiClient
    plane: LocalControlPlane


def _configurations(url: str, ca: str, scope: str) -> list[dict[str, Any]]:
    out = []
    for doc in yaml.safe_load_all((DEPLOY / "webhook" / "webhooks.yaml").read_text(encoding="utf-8")):
        doc = copy.deepcopy(doc)
        doc["metadata"] = {"name": f"{doc['metadata']['name']}-{scope}"}
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{url}{path}", "caBundle": ca}
            if "namespaceSelector" in hook:
                hook["namespaceSelector"] = {"matchLabels": {SCOPE: scope}}
            if hook["name"] in ("vkueue.kueuelog.io", "vqueue.kueuelog.io"):
                hook["objectSelector"] = {"matchLabels": {SCOPE: scope}}
        out.append(doc)
    return out


async def _register(api: client.ApiClient, docs: list[dict[str, Any]]) -> None:
    reg = client.AdmissionregistrationV1Api(api)
    for doc in docs:
        if doc["kind"] == "MutatingWebhookConfiguration":
            await reg.create_mutating_webhook_configuration(doc)
        else:
            await reg.create_validating_webhook_configuration(doc)


async def _unregister(api: client.ApiClient, docs: list[dict[str, Any]]) -> None:
    reg = client.AdmissionregistrationV1Api(api)
    for doc in docs:
        with contextlib.suppress(ApiException):
            if doc["kind"] == "MutatingWebhookConfiguration":
                await reg.delete_mutating_webhook_configuration(doc["metadata"]["name"])
            else:
                await reg.delete_validating_webhook_configuration(doc["metadata"]["name"])


async def _ensure_t9k(api: client.ApiClient) -> None:
    for doc in yaml.safe_load_all((DEPLOY / "t9k" / "queue.yaml").read_text(encoding="utf-8")):
        await create_or_replace(api, doc)
    ext = client.ApiextensionsV1Api(api)

    async def established() -> bool:
        crd = await ext.read_custom_resource_definition("queues.scheduler.tensorstack.dev")
        return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

    await eventually(established, what="the Queue CRD to be established")
    with contextlib.suppress(ApiException):
        await client.CoreV1Api(api).create_namespace({"metadata": {"name": t9k.NAMESPACE}})

    async def listable() -> bool:
        try:
            await client.CustomObjectsApi(api).list_namespaced_custom_object(
                t9k.GROUP, "v1beta1", t9k.NAMESPACE, "queues")
        except ApiException:
            return False
        return True

    await eventually(listable, what="Queues to be listable")


@pytest_asyncio.fixture(loop_scope="function")
async def webhooks(kube_control_plane: LocalControlPlane, kube_api_client: client.ApiClient,
                   kube_namespace: str, tmp_path: Path) -> AsyncIterator[Webhooks]:
    api = kube_api_client
    subprocess.run(["bash", str(DEPLOY / "webhook" / "selfsigned.sh"), "--local", str(tmp_path)], check=True,
                   capture_output=True)
    ca = base64.b64encode((tmp_path / "ca.crt").read_bytes()).decode()
    await _ensure_t9k(api)
    await apply_crds(api)
    scope = uuid.uuid4().hex[:10]
    await client.CoreV1Api(api).patch_namespace(kube_namespace, {"metadata": {"labels": {SCOPE: scope, "team": "a"}}},
                                                _content_type="application/merge-patch+json")
    port = free_port()
    runner = await serve(application(Cluster(api)), "127.0.0.1", port,
                         tls_context(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key")))
    docs = _configurations(f"https://127.0.0.1:{port}", ca, scope)
    await _register(api, docs)
    try:
        yield Webhooks(kube_namespace, scope, api, kube_control_plane)
    finally:
        await _unregister(api, docs)
        await runner.cleanup()


def _job(name: str, *, cpu: str = "1", queue: str | None = None, t9k_queue: str | None = None,
         suspend: bool | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if queue:
        meta["labels"] = {"kueue.x-k8s.io/queue-name": queue}
    template: dict[str, Any] = {"spec": {"restartPolicy": "Never", "containers": [
        {"name": "main", "image": "registry.k8s.io/e2e-test-images/agnhost:2.53",
         "resources": {"requests": {"cpu": cpu}}}]}}
    if t9k_queue:
        template["metadata"] = {"labels": {t9k.QUEUE_LABEL: t9k_queue}}
        template["spec"]["schedulerName"] = t9k.SCHEDULER_NAME
    spec: dict[str, Any] = {"template": template}
    if suspend is not None:
        spec["suspend"] = suspend
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


async def _queue(w: Webhooks, name: str, spec: dict[str, Any], allocated: dict[str, str] | None = None) -> str:
    """A Queue unique to this test (its name carries the scope); ``allocated`` is written to its
    status as the scheduler keeps it."""
    qname = f"{name}-{w.scope}"
    co = client.CustomObjectsApi(w.api)
    body = {"apiVersion": t9k.API_VERSION, "kind": "Queue",
            "metadata": {"name": qname, "namespace": t9k.NAMESPACE, "labels": {SCOPE: w.scope}}, "spec": spec}
    await co.create_namespaced_custom_object(t9k.GROUP, "v1beta1", t9k.NAMESPACE, "queues", body)
    if allocated is not None:
        await co.patch_namespaced_custom_object_status(t9k.GROUP, "v1beta1", t9k.NAMESPACE, "queues", qname,
                                                       {"status": {"allocated": allocated}},
                                                       _content_type="application/merge-patch+json")
    return qname


async def _create_job(api: client.ApiClient, namespace: str, job: dict[str, Any]) -> client.V1Job:
    return await client.BatchV1Api(api).create_namespaced_job(namespace, job)


async def _refused(api: client.ApiClient, namespace: str, job: dict[str, Any]) -> str:
    with pytest.raises(ApiException) as e:
        await _create_job(api, namespace, job)
    assert e.value.status in (400, 403, 500), e.value.body
    with pytest.raises(ApiException) as gone:
        await client.BatchV1Api(api).read_namespaced_job(job["metadata"]["name"], namespace)
    assert gone.value.status == 404
    return str(e.value.body)


async def test_a_queued_job_created_running_is_stored_suspended(webhooks: Webhooks) -> None:
    ns = webhooks.namespace
    kueue = await _create_job(webhooks.api, ns, _job("kueue", queue="lq", suspend=False))
    assert kueue.spec.suspend is True
    queue = await _queue(webhooks, "open", {"users": ["admin"], "quota": {"requests": {"cpu": 8}}})
    on_t9k = await _create_job(webhooks.api, ns, _job("t9k", t9k_queue=queue))
    assert on_t9k.spec.suspend is True
    plain = await _create_job(webhooks.api, ns, _job("plain"))
    assert not plain.spec.suspend  # not queued: not ours to hold


async def test_in_a_namespace_bound_to_a_tree_leaf_pods_are_created_gated_and_jobs_queued(
    webhooks: Webhooks,
) -> None:
    """ElasticQuotaTree's namespaces: a Deployment's (or a bare) pod is held by the admission gate
    from its creation, so it never reaches the kube-scheduler before admission; a Job's pods are
    the Job's; an unlabelled Job is queued on LocalQueue default, suspended. Unbound: untouched."""
    ns, core = webhooks.namespace, client.CoreV1Api(webhooks.api)

    def pod(name: str, owner: str | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name}
        if owner:
            meta["ownerReferences"] = [{"apiVersion": "batch/v1" if owner == "Job" else "apps/v1", "kind": owner,
                                        "name": "o", "uid": str(uuid.uuid4())}]
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [
            {"name": "main", "image": "registry.k8s.io/e2e-test-images/agnhost:2.53"}]}}

    def gates(p: client.V1Pod) -> list[str]:
        return [g.name for g in p.spec.scheduling_gates or []]

    assert gates(await core.create_namespaced_pod(ns, pod("before"))) == [], "not bound yet"
    assert not (await _create_job(webhooks.api, ns, _job("before"))).spec.suspend
    await client.CustomObjectsApi(webhooks.api).create_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", ns, "localqueues",
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "default", "labels": {ELASTIC_QUOTA_TREE_LABEL: "tree"}},
         "spec": {"clusterQueue": "root.a.1"}})
    assert gates(await core.create_namespaced_pod(ns, pod("bare"))) == [ADMISSION_GATE]
    assert gates(await core.create_namespaced_pod(ns, pod("replica", "ReplicaSet"))) == [ADMISSION_GATE]
    assert gates(await core.create_namespaced_pod(ns, pod("job-pod", "Job"))) == []
    job = await _create_job(webhooks.api, ns, _job("unlabelled", suspend=False))
    assert (job.spec.suspend, job.metadata.labels.get("kueue.x-k8s.io/queue-name")) == (True, "default")


async def test_the_seeds_node_selector_keeps_the_pods_on_peking_and_tianjin(webhooks: Webhooks) -> None:
    zones = {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In",
                                   "values": ["peking", "tianjin"]}]}
    queue = await _queue(webhooks, "zones", {"users": ["admin"], "nodeSelector": zones})
    job = await _create_job(webhooks.api, webhooks.namespace, _job("zoned", t9k_queue=queue, suspend=False))
    assert job.spec.suspend is True
    terms = job.spec.template.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
    (term,) = terms.node_selector_terms
    (req,) = term.match_expressions
    assert (req.key, req.operator, req.values) == ("topology.kubernetes.io/zone", "In", ["peking", "tianjin"])


async def test_the_seeds_quota_refuses_4_cpus_when_38_of_40_are_allocated(webhooks: Webhooks) -> None:
    queue = await _queue(webhooks, "demo", {"users": ["admin"], "quota": {"requests": {"cpu": 40}}},
                         allocated={"cpu": "38"})
    body = await _refused(webhooks.api, webhooks.namespace, _job("notebook", cpu="4", t9k_queue=queue))
    assert f"Queue {queue}: cpu quota 40, allocated 38, request 4: 42 would exceed the quota" in body
    assert "vjob.kueuelog.io" in body
    fits = await _create_job(webhooks.api, webhooks.namespace, _job("fits", cpu="2", t9k_queue=queue))
    assert fits.spec.suspend is True


async def test_closed_queue_and_missing_queue_are_refused(webhooks: Webhooks) -> None:
    queue = await _queue(webhooks, "shut", {"users": ["admin"], "closed": True})
    body = await _refused(webhooks.api, webhooks.namespace, _job("late", t9k_queue=queue))
    assert f"Queue {queue} is closed (spec.closed: true): new workloads are refused" in body
    body = await _refused(webhooks.api, webhooks.namespace, _job("lost", t9k_queue=f"nowhere-{webhooks.scope}"))
    assert f"Queue nowhere-{webhooks.scope} does not exist" in body


@contextlib.asynccontextmanager
async def _as(w: Webhooks, user: str, group: str | None = None) -> AsyncIterator[client.ApiClient]:
    """A client acting as ``user`` (and ``group``), allowed to create Jobs in the test namespace."""
    rbac = client.RbacAuthorizationV1Api(w.api)
    with contextlib.suppress(ApiException):  # one Role per namespace, shared by the users
        await rbac.create_namespaced_role(w.namespace, {
            "metadata": {"name": "jobs"},
            "rules": [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get"]}]})
    await rbac.create_namespaced_role_binding(w.namespace, {
        "metadata": {"name": f"jobs-{user}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "jobs"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})
    api = client.ApiClient(configuration=await load_configuration(w.plane), header_name="Impersonate-User",
                           header_value=user)
    if group:
        api.set_default_header("Impersonate-Group", group)
    try:
        yield api
    finally:
        await api.close()


async def test_users_groups_and_namespace_selector_grant_the_queue(webhooks: Webhooks) -> None:
    ns = webhooks.namespace
    queue = await _queue(webhooks, "perm", {"users": ["alice"], "groups": ["ml"]})
    by_ns = await _queue(webhooks, "byns", {"namespaceSelector": {"matchLabels": {"team": "a"}}})
    async with _as(webhooks, "alice") as alice:
        assert (await _create_job(alice, ns, _job("alice", t9k_queue=queue))).spec.suspend is True
    async with _as(webhooks, "carol", "ml") as carol:
        assert (await _create_job(carol, ns, _job("carol", t9k_queue=queue))).spec.suspend is True
    async with _as(webhooks, "bob") as bob:
        body = await _refused(bob, ns, _job("bob", t9k_queue=queue))
        assert f"user 'bob' may not use Queue {queue} in namespace {ns}" in body
        assert (await _create_job(bob, ns, _job("bob-ns", t9k_queue=by_ns))).spec.suspend is True


async def test_invalid_queue_and_kueue_objects_are_refused_with_the_parsers_message(webhooks: Webhooks) -> None:
    co = client.CustomObjectsApi(webhooks.api)
    with pytest.raises(ApiException) as e:
        await co.create_namespaced_custom_object(t9k.GROUP, "v1beta1", t9k.NAMESPACE, "queues", {
            "apiVersion": t9k.API_VERSION, "kind": "Queue",
            "metadata": {"name": f"bad-{webhooks.scope}", "labels": {SCOPE: webhooks.scope}},
            "spec": {"maxDuration": "2h45"}})
    assert "spec.maxDuration: invalid value '2h45'" in str(e.value.body)
    with pytest.raises(ApiException) as e:
        await co.create_namespaced_custom_object(t9k.GROUP, "v1beta1", t9k.NAMESPACE, "queues", {
            "apiVersion": t9k.API_VERSION, "kind": "Queue",
            "metadata": {"name": f"hot-{webhooks.scope}", "labels": {SCOPE: webhooks.scope}},
            "spec": {"priority": 101}})
    assert "spec.priority: must be between 0 and 100, got 101" in str(e.value.body)
    # The CRD's schema takes any string as a node label value; the parser (and so the webhook) does not.
    with pytest.raises(ApiException) as e:
        await co.create_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "resourceflavors", {
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
            "metadata": {"name": f"rf-{webhooks.scope}", "labels": {SCOPE: webhooks.scope}},
            "spec": {"nodeLabels": {"zone": "not ok!"}}})
    body = str(e.value.body)
    assert "vkueue.kueuelog.io" in body
    assert f"ResourceFlavor rf-{webhooks.scope}: spec.nodeLabels.zone: invalid label value 'not ok!'" in body
    ok = await co.create_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "resourceflavors", {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
        "metadata": {"name": f"rf-{webhooks.scope}", "labels": {SCOPE: webhooks.scope}},
        "spec": {"nodeLabels": {"zone": "peking"}}})
    assert ok["metadata"]["name"] == f"rf-{webhooks.scope}"


async def test_webhook_down_means_the_failure_policy_fail_refuses_queued_jobs(
        kube_api_client: client.ApiClient, kube_namespace: str, tmp_path: Path) -> None:
    api = kube_api_client
    subprocess.run(["bash", str(DEPLOY / "webhook" / "selfsigned.sh"), "--local", str(tmp_path)], check=True,
                   capture_output=True)
    ca = base64.b64encode((tmp_path / "ca.crt").read_bytes()).decode()
    scope = uuid.uuid4().hex[:10]
    await client.CoreV1Api(api).patch_namespace(kube_namespace, {"metadata": {"labels": {SCOPE: scope}}},
                                                _content_type="application/merge-patch+json")
    docs = _configurations(f"https://127.0.0.1:{free_port()}", ca, scope)  # nothing listens there
    assert {h["failurePolicy"] for d in docs for h in d["webhooks"]} == {"Fail"}
    await _register(api, docs)
    try:
        body = await _refused(api, kube_namespace, _job("held", queue="lq", suspend=False))
        assert "failed calling webhook" in body and "mjob.kueuelog.io" in body
    finally:
        await _unregister(api, docs)


async def test_the_watcher_with_t9k_publishes_queues_and_their_jobs(webhooks: Webhooks, tmp_path: Path) -> None:
    """``run watcher --t9k``: a Queue reaches the log as its ClusterQueue (status left out), and a
    Job on it as a Workload whose priority comes from the Queue."""
    import asyncio

    from events.codec import decode_envelope
    from events.envelope import Topics
    from events.messages import ObjectApplied
    from services.runtime.sqlite import SqliteLog
    from services.watcher.service import WatcherService

    queue = await _queue(webhooks, "watched", {"users": ["admin"], "priority": 70, "quota": {"requests": {"cpu": 8}}},
                         allocated={"cpu": "3"})
    await _create_job(webhooks.api, webhooks.namespace, _job("on-queue", cpu="2", t9k_queue=queue))
    log = SqliteLog(tmp_path / "log")
    stop = asyncio.Event()
    service = WatcherService(log, webhooks.api, cluster="c", t9k=True, backoff=(0.1, 1.0))
    task = asyncio.create_task(service.run(stop))

    def applied() -> list[Any]:
        out = []
        for r in log.read(Topics().cluster_events, 0, 100_000):
            ev = decode_envelope(r.value).event
            if isinstance(ev, ObjectApplied):
                out.append(ev.object)
        return out

    async def both() -> tuple[Any, Any] | None:
        objs = applied()
        cq = next((x for x in objs if getattr(x, "name", "") == queue and getattr(x, "t9k", None)), None)
        wl = next((x for x in objs if getattr(x, "queue_name", "") == queue), None)
        return (cq, wl) if cq is not None and wl is not None else None

    try:
        cq, wl = await eventually(both, what="the Queue's ClusterQueue and the Job's Workload on the log")
    finally:
        stop.set()
        await task
        log.close()
    assert cq.t9k.priority == 70 and cq.t9k.allocated == () and cq.cohort == t9k.COHORT
    assert wl.namespace == webhooks.namespace and t9k.is_t9k_workload(wl)
    assert wl.pod_sets[0].requests == (("cpu", 2000),)


async def test_queued_pods_anywhere_and_queued_serving_objects_pods_are_created_gated(webhooks: Webhooks) -> None:
    """Kueue's pod integration in a namespace bound to nothing: a pod with a queue-name label is
    created gated, labelled managed, with its role hash; a queued Deployment's and StatefulSet's pod
    templates are given the queue label and ``pod-suspending-parent``, so the pods made from them
    (the test plays the ReplicaSet and StatefulSet controllers) are gated too; unqueued ones are not."""
    from events.cluster import QUEUE_NAME_LABEL
    from events.jobkinds import pods as kpods

    ns, core, apps = webhooks.namespace, client.CoreV1Api(webhooks.api), client.AppsV1Api(webhooks.api)
    container = {"name": "main", "image": "registry.k8s.io/e2e-test-images/agnhost:2.53",
                 "resources": {"requests": {"cpu": "1"}}}

    def gates(p: client.V1Pod) -> list[str]:
        return [g.name for g in p.spec.scheduling_gates or []]

    queued = await core.create_namespaced_pod(ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "queued", "labels": {QUEUE_NAME_LABEL: "lq"}}, "spec": {"containers": [container]}})
    assert gates(queued) == [ADMISSION_GATE] and queued.metadata.labels[kpods.MANAGED] == "true"
    # over the spec as the webhook sees it: defaulted (the API server's default tolerations count, as for Kueue)
    stored = webhooks.api.sanitize_for_serialization(queued.spec)
    assert queued.metadata.annotations[kpods.ROLE_HASH] == kpods.role_hash(stored)
    plain = await core.create_namespaced_pod(ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain"},
                                                  "spec": {"containers": [container]}})
    assert gates(plain) == []

    template = {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [container]}}
    spec = {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": template}
    for kind, create in (("Deployment", apps.create_namespaced_deployment),
                         ("StatefulSet", apps.create_namespaced_stateful_set)):
        extra = {"serviceName": "web"} if kind == "StatefulSet" else {}
        made = await create(ns, {"apiVersion": "apps/v1", "kind": kind, "metadata": {
            "name": f"web-{kind.lower()}", "labels": {QUEUE_NAME_LABEL: "lq"}}, "spec": {**spec, **extra}})
        tmeta = made.spec.template.metadata
        assert tmeta.labels[QUEUE_NAME_LABEL] == "lq" and tmeta.labels[kpods.MANAGED] == "true"
        assert tmeta.annotations[kpods.SUSPENDED_BY_PARENT] == kind.lower()
        pod = await core.create_namespaced_pod(ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"web-{kind.lower()}-0", "labels": tmeta.labels, "annotations": tmeta.annotations},
            "spec": {"containers": [container]}})
        assert gates(pod) == [ADMISSION_GATE]
    unqueued = await apps.create_namespaced_deployment(ns, {"apiVersion": "apps/v1", "kind": "Deployment",
                                                            "metadata": {"name": "free"}, "spec": spec})
    assert QUEUE_NAME_LABEL not in (unqueued.spec.template.metadata.labels or {})


async def test_queued_job_kinds_are_created_held_managed_by_multikueue_and_refused_as_simulate_refuses(
    webhooks: Webhooks,
) -> None:
    """A JobSet created running with a queue label is stored suspended; for a LocalQueue whose
    ClusterQueue has a MultiKueue AdmissionCheck, a JobSet and a Job are stored with ``managedBy:
    kueue.x-k8s.io/multikueue``; a queued JobSet simulate would refuse is refused naming the field;
    a running JobSet's queue cannot be changed; an unqueued one is left alone."""
    from events.cluster import KUEUE_GROUP, MULTIKUEUE_CONTROLLER, QUEUE_NAME_LABEL
    from tests.integration.jobkind_crds import ensure_job_kind_crds

    api, ns, scope = webhooks.api, webhooks.namespace, webhooks.scope
    await ensure_job_kind_crds(api, "JobSet")
    co = client.CustomObjectsApi(api)
    js = ("jobset.x-k8s.io", "v1alpha2", ns, "jobsets")
    check, config = f"mk-{scope}", f"mk-config-{scope}"
    await co.create_cluster_custom_object(KUEUE_GROUP, "v1beta2", "admissionchecks", {
        "apiVersion": f"{KUEUE_GROUP}/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": check},
        "spec": {"controllerName": MULTIKUEUE_CONTROLLER,
                 "parameters": {"apiGroup": KUEUE_GROUP, "kind": "MultiKueueConfig", "name": config}}})
    await co.create_cluster_custom_object(KUEUE_GROUP, "v1beta2", "clusterqueues", {
        "apiVersion": f"{KUEUE_GROUP}/v1beta2", "kind": "ClusterQueue", "metadata": {"name": f"mk-cq-{scope}"},
        "spec": {"namespaceSelector": {}, "admissionChecksStrategy": {"admissionChecks": [{"name": check}]},
                 "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                     {"name": "default", "resources": [{"name": "cpu", "nominalQuota": "4"}]}]}]}})
    await co.create_namespaced_custom_object(KUEUE_GROUP, "v1beta2", ns, "localqueues", {
        "apiVersion": f"{KUEUE_GROUP}/v1beta2", "kind": "LocalQueue", "metadata": {"name": "mk-lq"},
        "spec": {"clusterQueue": f"mk-cq-{scope}"}})

    def jobset(name: str, queue: str | None, cpu: str = "1") -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name}
        if queue:
            meta["labels"] = {QUEUE_NAME_LABEL: queue}
        pod = {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": "busybox:1.36", "resources": {"requests": {"cpu": cpu}}}]}}
        return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta,
                "spec": {"suspend": False, "replicatedJobs": [
                    {"name": "w", "replicas": 1, "template": {"spec": {"template": pod}}}]}}

    plain_queue = await eventually(lambda: co.create_namespaced_custom_object(*js, jobset("held", "lq")),
                                   what="a queued JobSet created (CRD served)")
    assert plain_queue["spec"]["suspend"] is True and "managedBy" not in plain_queue["spec"]
    placed = await co.create_namespaced_custom_object(*js, jobset("placed", "mk-lq"))
    assert placed["spec"]["suspend"] is True and placed["spec"]["managedBy"] == MULTIKUEUE_CONTROLLER
    job = await _create_job(api, ns, _job("placed-job", queue="mk-lq"))
    assert job.spec.suspend is True and job.spec.managed_by == MULTIKUEUE_CONTROLLER
    free = await co.create_namespaced_custom_object(*js, jobset("free", None))
    assert free["spec"]["suspend"] is False

    with pytest.raises(ApiException) as refused:
        await co.create_namespaced_custom_object(*js, jobset("bad", "lq", cpu="lots"))
    assert refused.value.status in (400, 403) and "spec.replicatedJobs[0]" in str(refused.value.body)

    await co.patch_namespaced_custom_object(*js, "held", {"spec": {"suspend": False}},
                                            _content_type="application/merge-patch+json")  # admitted, running
    with pytest.raises(ApiException) as moved:
        await co.patch_namespaced_custom_object(*js, "held", {"metadata": {"labels": {QUEUE_NAME_LABEL: "other"}}},
                                                _content_type="application/merge-patch+json")
    assert "field is immutable" in str(moved.value.body)
    for plural, name in (("clusterqueues", f"mk-cq-{scope}"), ("admissionchecks", check)):
        await co.delete_cluster_custom_object(KUEUE_GROUP, "v1beta2", plural, name)
async def _denied(call: Any) -> str:
    with pytest.raises(ApiException) as e:
        await call
    assert e.value.status == 403, e.value.body
    return str(e.value.body)


async def test_a_queued_leaderworkerset_and_statefulset_as_kueues_webhooks_treat_them(webhooks: Webhooks) -> None:
    """A queued LeaderWorkerSet's templates are marked (queue, pod-suspending-parent, serving), so a
    pod made from them (the test plays the LWS controller) is created gated; its group size may not
    change, its replicas may. A queued StatefulSet is resized only through zero, and up from zero only
    once its previous Workload is gone."""
    from events.cluster import QUEUE_NAME_LABEL
    from events.jobkinds import pods as kpods
    from events.jobkinds import serving
    from tests.integration.lws_crd import GROUP, PLURAL, VERSION, ensure_lws_crd

    await ensure_lws_crd(webhooks.api)
    ns, core, apps = webhooks.namespace, client.CoreV1Api(webhooks.api), client.AppsV1Api(webhooks.api)
    co = client.CustomObjectsApi(webhooks.api)
    merge = "application/merge-patch+json"
    container = {"name": "main", "image": "registry.k8s.io/e2e-test-images/agnhost:2.53",
                 "resources": {"requests": {"cpu": "1"}}}
    template = {"metadata": {"labels": {"app": "srv"}}, "spec": {"containers": [container]}}
    made = await co.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "LeaderWorkerSet",
        "metadata": {"name": "srv", "labels": {QUEUE_NAME_LABEL: "lq"}},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "leaderTemplate": template,
                                                         "workerTemplate": template}}})
    for key in ("leaderTemplate", "workerTemplate"):
        tmeta = made["spec"]["leaderWorkerTemplate"][key]["metadata"]
        assert tmeta["labels"] == {"app": "srv", QUEUE_NAME_LABEL: "lq"}
        assert tmeta["annotations"] == {kpods.SUSPENDED_BY_PARENT: serving.LWS_FRAMEWORK, kpods.SERVING: "true"}
    pod = await core.create_namespaced_pod(ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "srv-0", "labels": {**tmeta["labels"], serving.LWS_NAME_LABEL: "srv",
                                    serving.LWS_GROUP_INDEX_LABEL: "0"}, "annotations": tmeta["annotations"]},
        "spec": {"containers": [container]}})
    assert [g.name for g in pod.spec.scheduling_gates or []] == [ADMISSION_GATE]
    why = await _denied(co.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "srv", {
        "spec": {"leaderWorkerTemplate": {"size": 3}}}, _content_type=merge))
    assert f"LeaderWorkerSet {ns}/srv: spec.leaderWorkerTemplate.size: field is immutable" in why
    await co.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "srv", {"spec": {"replicas": 3}},
                                            _content_type=merge)

    sts = await apps.create_namespaced_stateful_set(ns, {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web", "labels": {QUEUE_NAME_LABEL: "lq"}},
        "spec": {"replicas": 2, "serviceName": "web", "selector": {"matchLabels": {"app": "srv"}},
                 "template": template}})
    why = await _denied(apps.patch_namespaced_stateful_set("web", ns, {"spec": {"replicas": 3}}))
    assert f"StatefulSet {ns}/web: spec.replicas: field is immutable" in why
    await apps.patch_namespaced_stateful_set("web", ns, {"spec": {"replicas": 0}})
    name = serving.statefulset_workload_name("web", sts.metadata.uid)
    await co.create_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", ns, "workloads", {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload", "metadata": {"name": name},
        "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 2, "template": template}]}})
    why = await _denied(apps.patch_namespaced_stateful_set("web", ns, {"spec": {"replicas": 2}}))
    assert "spec.replicas: workload from previous scale-down is still being deleted" in why
    await co.delete_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", ns, "workloads", name)
    scaled = await apps.patch_namespaced_stateful_set("web", ns, {"spec": {"replicas": 2}})
    assert scaled.spec.replicas == 2
