"""The admission webhook service: HTTPS endpoints the API server calls (``deploy/webhook/``).

Routes (each takes and returns an ``admission.k8s.io/v1`` AdmissionReview):

- ``POST /mutate-batch-v1-job``: queued Jobs are created suspended (:func:`review.mutate_job`), with
  ``spec.managedBy: kueue.x-k8s.io/multikueue`` when their ClusterQueue has a MultiKueue check;
- ``POST /mutate-v1-pod``: pods in a namespace bound to an ElasticQuotaTree leaf, and pods with a
  queue-name label anywhere (Kueue's pod integration), are created held by the admission gate
  (:func:`review.mutate_pod`);
- ``POST /mutate-apps-v1``: a queued Deployment's or StatefulSet's pod template gets the queue
  label and ``pod-suspending-parent``, so its pods are created gated (:func:`review.mutate_serving`);
- ``POST /mutate-job-kinds`` and ``POST /validate-job-kinds``: the workload kinds besides Job
  (JobSet, Kubeflow, MPIJob, Ray, AppWrapper, SparkApplication; :mod:`services.webhook.kinds`): a
  queued one is created held, with ``managedBy`` for MultiKueue where its ClusterQueue uses it, and
  refused at creation as ``simulate`` refuses it, or on an update of its queue while it runs;
- ``POST /mutate-leaderworkerset``: a queued LeaderWorkerSet's leader and worker templates get the
  queue label, ``pod-suspending-parent`` and ``pod-group-serving`` (:func:`serving_review.mutate_lws`);
- ``POST /validate-serving``: StatefulSets and LeaderWorkerSets, refused as Kueue's webhooks refuse
  them (queue name, immutable templates and sizes; :func:`serving_review.validate_serving`);
- ``POST /validate-kueue``: Kueue objects and T9k Queues, checked as ``simulate`` checks them;
- ``POST /validate-t9k-job``: Jobs on a T9k Queue, refused at creation by the Queue's rules;
- ``GET /healthz``.

Whether a namespace is bound to a tree leaf it reads from the LocalQueue ``default`` the
actuator's tree reconciler keeps there (labelled ``kueuelog.io/elastic-quota-tree``). For a Job on
a T9k Queue it reads the Queue (``t9k-system``), the Job's Namespace and the
ConfigMap ``t9k-system/resource-shapes`` from the API server. A review it cannot decide (the API
unreachable, a malformed review) is answered with an error status, so that the API server
applies the webhook's ``failurePolicy``.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog
from aiohttp import web
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from events import t9k
from events.cluster import ELASTIC_QUOTA_TREE_LABEL, KUEUE_GROUP, MULTIKUEUE_CONTROLLER, QUEUE_NAME_LABEL
from events.elasticquota import DEFAULT_LOCAL_QUEUE
from services.webhook import kinds, review, serving_review

log = structlog.get_logger("kueuelog.webhook")

Decide = Callable[[review.Review], Awaitable[dict[str, Any]]]


class Cluster:
    """The reads a T9k Job's validation needs, through one ApiClient."""

    def __init__(self, api: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)

    async def queue(self, name: str) -> Mapping[str, Any] | None:
        """The Queue ``t9k-system/<name>``, or ``None`` when there is none."""
        try:
            found: Mapping[str, Any] = await self.custom.get_namespaced_custom_object(
                t9k.GROUP, "v1beta1", t9k.NAMESPACE, "queues", name)
        except ApiException as e:
            if e.status != 404:
                raise
            return None
        return found

    async def bound(self, namespace: str) -> bool:
        """Whether ``namespace`` is bound to an ElasticQuotaTree leaf (its LocalQueue ``default`` is
        the tree reconciler's)."""
        try:
            lq: Mapping[str, Any] = await self.custom.get_namespaced_custom_object(
                KUEUE_GROUP, "v1beta2", namespace, "localqueues", DEFAULT_LOCAL_QUEUE)
        except ApiException as e:
            if e.status != 404:
                raise
            return False
        return ELASTIC_QUOTA_TREE_LABEL in ((lq.get("metadata") or {}).get("labels") or {})

    async def multikueue(self, namespace: str, local_queue: str) -> bool:
        """Whether LocalQueue ``namespace/local_queue`` leads to a ClusterQueue with a MultiKueue
        admission check (Kueue's ``ApplyDefaultForManagedBy``); ``False`` when any of them is missing."""
        lq = await self._get(namespace, "localqueues", local_queue)
        cq_name = ((lq or {}).get("spec") or {}).get("clusterQueue")
        cq = await self._get("", "clusterqueues", str(cq_name)) if cq_name else None
        spec = (cq or {}).get("spec") or {}
        names = [str(n) for n in spec.get("admissionChecks") or []]
        names += [str(c.get("name")) for c in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
                  if isinstance(c, Mapping)]
        for name in names:
            check = await self._get("", "admissionchecks", name)
            if ((check or {}).get("spec") or {}).get("controllerName") == MULTIKUEUE_CONTROLLER:
                return True
        return False

    async def _get(self, namespace: str, plural: str, name: str) -> Mapping[str, Any] | None:
        try:
            if namespace:
                found: Mapping[str, Any] = await self.custom.get_namespaced_custom_object(
                    KUEUE_GROUP, "v1beta2", namespace, plural, name)
            else:
                found = await self.custom.get_cluster_custom_object(KUEUE_GROUP, "v1beta2", plural, name)
        except ApiException as e:
            if e.status != 404:
                raise
            return None
        return found
    async def workload_exists(self, namespace: str, name: str) -> bool:
        try:
            await self.custom.get_namespaced_custom_object(KUEUE_GROUP, "v1beta2", namespace, "workloads", name)
        except ApiException as e:
            if e.status != 404:
                raise
            return False
        return True

    async def lookup(self, queue: str, namespace: str) -> review.Lookup:
        found = await self.queue(queue)
        labels: dict[str, str] = {"kubernetes.io/metadata.name": namespace}
        try:
            ns = await self.core.read_namespace(namespace)
            labels.update(ns.metadata.labels or {})
        except ApiException as e:
            if e.status != 404:
                raise
        shapes = None
        if found is not None and (found.get("spec") or {}).get("resourceShapeProfile"):
            try:
                cm = await self.core.read_namespaced_config_map(t9k.SHAPES_CONFIGMAP, t9k.NAMESPACE)
                shapes = dict(cm.data or {})
            except ApiException as e:
                if e.status != 404:
                    raise
        return review.Lookup(queue=found, namespace_labels=labels, shapes=shapes)


def _handler(decide: Decide) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": "not JSON"}, status=400)
        if not isinstance(body, dict) or not isinstance(body.get("request"), dict):
            return web.json_response({"error": "not an AdmissionReview"}, status=400)
        try:
            answer = await decide(body)
        except ApiException as e:
            log.warning("webhook.api_error", path=request.path, status=e.status, reason=e.reason)
            return web.json_response({"error": f"the API server answered {e.status} {e.reason}"}, status=503)
        verdict = answer["response"]
        log.info("webhook.review", path=request.path, uid=verdict["uid"], allowed=verdict["allowed"],
                 message=verdict.get("status", {}).get("message", ""))
        return web.json_response(answer)

    return handle


async def _mutate_job(cluster: Cluster | None, body: review.Review) -> dict[str, Any]:
    request = body["request"]
    job = request.get("object") or {}
    if cluster is None or request.get("operation") != "CREATE" or not isinstance(job, dict):
        return review.mutate_job(body)
    queue = review.t9k_queue_of(job)
    if queue is not None:
        return review.mutate_job(body, await cluster.queue(queue))
    namespace = str(request.get("namespace", ""))
    lq = ((job.get("metadata") or {}).get("labels") or {}).get(QUEUE_NAME_LABEL)
    if isinstance(lq, str):
        return review.mutate_job(body, multikueue=await cluster.multikueue(namespace, lq))
    return review.mutate_job(body, bound=await cluster.bound(namespace))


async def _mutate_job_kind(cluster: Cluster | None, body: review.Review) -> dict[str, Any]:
    request = body["request"]
    obj = request.get("object") or {}
    lq = kinds.queue_of(obj) if isinstance(obj, dict) and request.get("operation") == "CREATE" else None
    if cluster is None or lq is None:
        return kinds.mutate_kind(body)
    return kinds.mutate_kind(body, multikueue=await cluster.multikueue(str(request.get("namespace", "")), lq))


def application(cluster: Cluster | None) -> web.Application:
    async def mutate(body: review.Review) -> dict[str, Any]:
        return await _mutate_job(cluster, body)

    async def mutate_job_kind(body: review.Review) -> dict[str, Any]:
        return await _mutate_job_kind(cluster, body)

    async def validate_job_kind(body: review.Review) -> dict[str, Any]:
        return kinds.validate_kind(body)

    async def mutate_pod(body: review.Review) -> dict[str, Any]:
        request = body["request"]
        if cluster is None or request.get("operation") != "CREATE":
            return review.mutate_pod(body, bound=False)
        return review.mutate_pod(body, bound=await cluster.bound(str(request.get("namespace", ""))))

    async def mutate_serving(body: review.Review) -> dict[str, Any]:
        return review.mutate_serving(body)

    async def validate(body: review.Review) -> dict[str, Any]:
        return review.validate_object(body)

    async def mutate_lws(body: review.Review) -> dict[str, Any]:
        return serving_review.mutate_lws(body)

    async def validate_serving(body: review.Review) -> dict[str, Any]:
        wanted = serving_review.statefulset_scaled_up_from_zero(body["request"])
        exists = cluster is not None and wanted is not None and await cluster.workload_exists(*wanted)
        return serving_review.validate_serving(body, workload_exists=exists)

    async def validate_job(body: review.Review) -> dict[str, Any]:
        request = body["request"]
        job = request.get("object") or {}
        queue = review.t9k_queue_of(job) if isinstance(job, dict) else None
        if queue is None or request.get("operation") != "CREATE":
            return review.response(body, allowed=True)
        if cluster is None:
            return review.response(body, allowed=False, message="this webhook cannot read Queues")
        return review.validate_t9k_job(body, await cluster.lookup(queue, str(request.get("namespace", ""))))

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    app = web.Application(client_max_size=4 * 1024 * 1024)
    app.router.add_post("/mutate-batch-v1-job", _handler(mutate))
    app.router.add_post("/mutate-v1-pod", _handler(mutate_pod))
    app.router.add_post("/mutate-apps-v1", _handler(mutate_serving))
    app.router.add_post("/mutate-job-kinds", _handler(mutate_job_kind))
    app.router.add_post("/validate-job-kinds", _handler(validate_job_kind))
    app.router.add_post("/mutate-leaderworkerset", _handler(mutate_lws))
    app.router.add_post("/validate-serving", _handler(validate_serving))
    app.router.add_post("/validate-kueue", _handler(validate))
    app.router.add_post("/validate-t9k-job", _handler(validate_job))
    app.router.add_get("/healthz", healthz)
    return app


def tls_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    return ctx


async def serve(app: web.Application, host: str, port: int, tls: ssl.SSLContext) -> web.AppRunner:
    """Start serving; the caller cleans up the returned runner."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=tls)
    await site.start()
    return runner
