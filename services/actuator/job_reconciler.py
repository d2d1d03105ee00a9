"""The Job integration: what makes a queued ``batch/v1`` Job wait for quota in a real cluster.

Kueue does this in two places: a mutating webhook that creates a queued Job suspended,
and the job reconciler (``pkg/controller/jobframework/reconciler.go``) that creates the
Job's Workload, suspends a Job running without admission and marks the Workload
``Finished`` when the Job ends. kueuelog has no webhook, so this reconciler does the
webhook's part *after* creation, by list+watch of the Jobs labelled
``kueue.x-k8s.io/queue-name``:

- a queued Job that is not suspended and is not admitted (no ``kueuelog.io/decision-id``
  annotation, which the actuator writes on admission, or ``kueuelog.io/evicted`` beside it,
  which it adds on eviction) is suspended at once (policy ``suspend``); its pods may have started in between, the job
  controller stops them. With policy ``reject`` it is labelled ``kueuelog.io/rejected``,
  annotated with the reason, left as it is and not queued; a Warning Event says why.
  Without a webhook its creation cannot be refused: it runs outside quota.
- the Job's Workload (``kueue.x-k8s.io/v1beta2``, our CRDs' storage version, spelled for it;
  Kueue's name hash, owned by the Job) is
  created once the Job is suspended with no active pods (as Kueue's
  ``handleJobWithNoWorkload``), or when it runs admitted. Its pod set comes from the same
  conversion the scheduler folds (``events.manifests.normalize`` of the Job), so the two
  agree; its priority is resolved as Kueue's ``prepareWorkload`` resolves it.
- when the Job ends (``Complete`` or ``Failed`` True), the Workload gets ``Finished=True``
  (reason ``Succeeded``/``Failed``) through the status subresource, once.

Deliberately not done: Kueue's ``kueue.x-k8s.io/resource-in-use`` finalizer (nothing here
would remove it, so it would block deletion; the scheduler's state comes from the log,
not from the Workload object), updating a Workload whose Job changed queue or shape, and
Job deletion (the owner reference lets the garbage collector delete the Workload).

Pure planning (:func:`plan_job`, :func:`finished_status`, :func:`default_priority`) is
separate from the I/O shell (:class:`JobReconciler`), which executes plans. Every write to
a Job carries its resourceVersion as a precondition: on 409 the Job is read again and
planned again, so a Job the actuator has just admitted is never suspended by mistake.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Literal

import aiohttp
import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from events import conditions as cond
from events import jobs, t9k
from events import objects as o
from events.cluster import (
    DECISION_ID_ANNOTATION,
    EVICTED_ANNOTATION,
    JOB_UID_LABEL,
    KUEUE_GROUP,
    POD_PRIORITY_CLASS_SOURCE,
    PROVISIONING_ANNOTATION_PREFIX,
    QUEUE_NAME_LABEL,
    REJECTED_LABEL,
    REJECTION_ANNOTATION,
    WORKLOAD_PRIORITY_CLASS_SOURCE,
    ConditionStatus,
    ConditionType,
    JobConditionType,
)
from events.jobkinds import prebuilt
from events.kueue_versions import STORAGE_VERSION, respell
from events.manifests import Document, ManifestError, format_time, normalize
from services.actuator import checkplan, prebuiltplan
from services.actuator.kubeapi import KubeApiError, status_retriable
from services.runtime.clock import wall_clock_ms as _wall_clock_ms
from services.runtime.kubeclient import watch_lines

KUEUE_VERSION: Final = STORAGE_VERSION
"""The version the reconciler reads WorkloadPriorityClasses and creates and finishes Workloads at."""

Policy = Literal["suspend", "reject"]
POLICIES: Final = ("suspend", "reject")

WORKLOADS: Final = "workloads"
WORKLOAD_PRIORITY_CLASSES: Final = "workloadpriorityclasses"
COMPONENT: Final = "kueuelog-job-reconciler"
MERGE_PATCH: Final = "application/merge-patch+json"
_MAX_ATTEMPTS = 6  # plans per reconcile: a suspend, then a few conflicts

_log = structlog.get_logger(__name__)


# --- pure planning ---------------------------------------------------------------------------


class JobError(ValueError):
    """A Job this reconciler cannot read, naming the Job and the field."""

    def __init__(self, job: str, field: str, message: str) -> None:
        super().__init__(f"Job {job}: {field}: {message}" if field else f"Job {job}: {message}")
        self.job, self.field, self.message = job, field, message


@dataclass(frozen=True)
class JobRef:
    namespace: str
    name: str
    uid: str
    resource_version: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class PriorityQuery:
    """Where the Workload's priority comes from; a PriorityClass named ``""`` means the
    cluster's default (``globalDefault``) PriorityClass, if any."""

    kind: Literal["WorkloadPriorityClass", "PriorityClass", "Queue"]  # Queue: a T9k Queue's spec.priority
    name: str


@dataclass(frozen=True)
class ResolvedPriority:
    class_name: str = ""
    source: str = ""
    value: int = 0


@dataclass(frozen=True)
class WorkloadDraft:
    """The Workload to create, all but its priority (which needs a lookup)."""

    namespace: str
    name: str
    body: Mapping[str, Any]
    priority: PriorityQuery
    prebuilt: o.Workload | None = None
    """For a job naming a prebuilt Workload (``name``): the Workload it would be itself, to compare
    with the existing one, which is adopted rather than created (``services.actuator.prebuiltplan``)."""

    def body_with(self, priority: ResolvedPriority) -> dict[str, Any]:
        """The body to create: Kueue always sets ``priority`` (0 without a class)."""
        body = copy.deepcopy(dict(self.body))
        spec = body["spec"]
        if priority.class_name:
            spec["priorityClassName"] = priority.class_name
        spec["priority"] = priority.value
        if priority.source:
            spec["priorityClassSource"] = priority.source
        return respell(body)  # v1beta2 spells the class as spec.priorityClassRef


@dataclass(frozen=True)
class Finished:
    workload: str
    succeeded: bool
    message: str


@dataclass(frozen=True)
class JobPlan:
    """What to do for one Job. After a suspend the shell plans again with the suspended Job."""

    job: JobRef
    suspend: bool = False
    reject: str | None = None  # the reason, when the Job is to be rejected
    workload: WorkloadDraft | None = None  # to make sure it exists
    finished: Finished | None = None  # to write on the Workload
    invalid: JobError | None = None  # cannot become a Workload: report it

    @property
    def nothing_to_do(self) -> bool:
        return not self.suspend and self.reject is None and self.workload is None and self.finished is None \
            and self.invalid is None


def _mapping(parent: Mapping[str, Any], key: str, path: str, job: str) -> Mapping[str, Any]:
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise JobError(job, path, f"expected an object, got {type(value).__name__}")
    return value


def _string_map(parent: Mapping[str, Any], key: str, path: str, job: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in _mapping(parent, key, path, job).items():
        if not isinstance(v, str):
            raise JobError(job, f"{path}.{k}", f"expected a string, got {type(v).__name__}")
        out[str(k)] = v
    return out


def _job_ref(job: Mapping[str, Any]) -> JobRef:
    meta = job.get("metadata")
    if not isinstance(meta, Mapping):
        raise JobError("?", "metadata", "required field is missing")
    name, namespace = meta.get("name"), meta.get("namespace")
    shown = f"{namespace if isinstance(namespace, str) and namespace else '?'}/{name if isinstance(name, str) else '?'}"
    for key, value in (("name", name), ("namespace", namespace), ("uid", meta.get("uid")),
                       ("resourceVersion", meta.get("resourceVersion"))):
        if not isinstance(value, str) or not value:
            raise JobError(shown, f"metadata.{key}", "required field is missing")
    api_version, kind = job.get("apiVersion", "batch/v1"), job.get("kind", "Job")
    if (api_version, kind) != ("batch/v1", "Job"):
        raise JobError(shown, "kind", f"expected a batch/v1 Job, got {api_version} {kind}")
    return JobRef(namespace=str(namespace), name=str(name), uid=str(meta["uid"]),
                  resource_version=str(meta["resourceVersion"]))


def _finished(job: Mapping[str, Any], shown: str) -> tuple[bool, str] | None:
    """(succeeded, message) of the first Complete/Failed condition that is True, as Kueue reads it."""
    status = _mapping(job, "status", "status", shown)
    conditions = status.get("conditions") or []
    if not isinstance(conditions, list):
        raise JobError(shown, "status.conditions", f"expected a list, got {type(conditions).__name__}")
    for i, c in enumerate(conditions):
        if not isinstance(c, Mapping) or not isinstance(c.get("type"), str) or not isinstance(c.get("status"), str):
            raise JobError(shown, f"status.conditions[{i}]", "expected an object with string type and status")
        if c["type"] in (JobConditionType.COMPLETE, JobConditionType.FAILED) and c["status"] == ConditionStatus.TRUE:
            succeeded = c["type"] == JobConditionType.COMPLETE
            message = c.get("message") if isinstance(c.get("message"), str) else ""
            return succeeded, cond.finished(succeeded, message or "", 0).message  # its default when empty
    return None


def _draft(job: Mapping[str, Any], ref: JobRef, cluster: str) -> WorkloadDraft:
    """The Workload Kueue's ``constructWorkload`` would build, from the scheduler's own conversion."""
    try:
        wl = normalize(Document(file=f"cluster {cluster}" if cluster else "cluster", index=1,
                                body={**job, "apiVersion": "batch/v1", "kind": "Job"}))
    except ManifestError as e:
        raise JobError(str(ref), e.field, e.message) from None
    if not isinstance(wl, o.Workload) or len(wl.pod_sets) != 1:  # the label was checked: cannot happen
        raise JobError(str(ref), "", "did not convert to a Workload with one pod set")
    pod_set = wl.pod_sets[0]
    template = copy.deepcopy(dict(_mapping(_mapping(job, "spec", "spec", str(ref)), "template", "spec.template",
                                           str(ref))))
    if isinstance(template.get("metadata"), dict) and template["metadata"].get("creationTimestamp", 0) is None:
        template["metadata"] = {k: v for k, v in template["metadata"].items() if k != "creationTimestamp"}
    ps: dict[str, Any] = {"name": pod_set.name, "count": pod_set.count, "template": template}
    if pod_set.min_count is not None:
        ps["minCount"] = pod_set.min_count
    meta: dict[str, Any] = {
        "name": wl.name,
        "namespace": ref.namespace,
        "labels": {JOB_UID_LABEL: ref.uid},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": ref.name, "uid": ref.uid,
                             "controller": True, "blockOwnerDeletion": True}],
    }
    provreq = {k: v for k, v in wl.annotations if k.startswith(PROVISIONING_ANNOTATION_PREFIX)}
    if provreq:
        meta["annotations"] = provreq
    if wl.priority_ref is None:
        query = PriorityQuery("PriorityClass", "")
    elif wl.priority_ref.source == WORKLOAD_PRIORITY_CLASS_SOURCE:
        query = PriorityQuery("WorkloadPriorityClass", wl.priority_ref.name)
    elif wl.priority_ref.source == t9k.PRIORITY_SOURCE:
        query = PriorityQuery("Queue", wl.priority_ref.name)
    else:
        query = PriorityQuery("PriorityClass", wl.priority_ref.name)
    body = {"apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}", "kind": "Workload", "metadata": meta,
            "spec": {"queueName": wl.queue_name, "podSets": [ps]}}
    named = prebuilt.prebuilt_name(_string_map(_mapping(job, "metadata", "metadata", str(ref)), "labels",
                                               "metadata.labels", str(ref)), None) or _long_prebuilt(job)
    return WorkloadDraft(namespace=ref.namespace, name=wl.name, body=body, priority=query,
                         prebuilt=wl if named else None)


def _long_prebuilt(job: Mapping[str, Any]) -> str:
    annotations = (job.get("metadata") or {}).get("annotations")
    return prebuilt.prebuilt_name(None, annotations) if isinstance(annotations, Mapping) else ""


def rejection_message(ref: JobRef, queue: str) -> str:
    return (f"Job {ref} was created running although it is queued ({QUEUE_NAME_LABEL}={queue}); a queued Job must be "
            f"created with spec.suspend=true so that it waits for quota. It is not queued and runs outside quota "
            f"(kueuelog has no admission webhook to refuse it): delete it and create it suspended.")


def plan_job(job: Mapping[str, Any], *, policy: Policy = "suspend", cluster: str = "") -> JobPlan:
    """What to do for a Job, given as the API returns it (camelCase JSON). Raises
    :class:`JobError` when the Job cannot even be read (identity, labels, flags, conditions);
    a Job that reads but cannot become a Workload (a bad quantity, say) is ``plan.invalid``."""
    ref = _job_ref(job)
    shown = str(ref)
    meta = _mapping(job, "metadata", "metadata", shown)
    labels = _string_map(meta, "labels", "metadata.labels", shown)
    annotations = _string_map(meta, "annotations", "metadata.annotations", shown)
    queue = labels.get(QUEUE_NAME_LABEL) or t9k.queue_of_job(job)
    if queue is None or labels.get(REJECTED_LABEL) == "true":
        return JobPlan(ref)  # not queued, or rejected for good
    spec = _mapping(job, "spec", "spec", shown)
    suspended = spec.get("suspend", False)
    if not isinstance(suspended, bool):
        raise JobError(shown, "spec.suspend", f"expected a boolean, got {suspended!r}")
    active = _mapping(job, "status", "status", shown).get("active") or 0
    if not isinstance(active, int) or isinstance(active, bool):
        raise JobError(shown, "status.active", f"expected an integer, got {active!r}")
    ended = _finished(job, shown)
    if ended is not None:
        # Kueue writes Finished only on a Workload that exists; a finished Job gets none.
        named = prebuilt.prebuilt_name(labels, annotations)
        return JobPlan(ref, finished=Finished(named or jobs.workload_name_for_job(ref.name, ref.uid), *ended))
    admitted = DECISION_ID_ANNOTATION in annotations and EVICTED_ANNOTATION not in annotations
    invalid: JobError | None = None
    draft: WorkloadDraft | None = None
    try:
        draft = _draft(job, ref, cluster)
    except JobError as e:
        invalid = e
    if not suspended and not admitted:
        if policy == "reject":
            reason = rejection_message(ref, queue)
            return JobPlan(ref, reject=f"{reason} Also: {invalid}" if invalid else reason)
        return JobPlan(ref, suspend=True, invalid=invalid)
    if invalid is not None:
        return JobPlan(ref, invalid=invalid)
    if suspended and active > 0:
        return JobPlan(ref)  # Kueue waits for the pods to stop before it creates the Workload
    return JobPlan(ref, workload=draft)


def default_priority(priority_classes: list[Mapping[str, Any]]) -> ResolvedPriority:
    """Kueue's ``getDefaultPriority``: the globalDefault PriorityClass with the lowest value
    (there may be several after a race), else none and priority 0."""
    defaults = sorted(
        (int(pc.get("value") or 0), str((pc.get("metadata") or {}).get("name", "")))
        for pc in priority_classes
        if pc.get("globalDefault") is True
    )
    if not defaults:
        return ResolvedPriority()
    value, name = defaults[0]
    return ResolvedPriority(class_name=name, source=POD_PRIORITY_CLASS_SOURCE, value=value)


def finished_status(workload: Mapping[str, Any], finished: Finished, now_ms: int) -> dict[str, Any] | None:
    """The merge patch (with a resourceVersion precondition) that sets ``Finished=True`` on the
    Workload's status, keeping its other conditions; ``None`` when it is already set."""
    meta = workload.get("metadata") or {}
    conditions = [c for c in ((workload.get("status") or {}).get("conditions") or []) if isinstance(c, Mapping)]
    if any(c.get("type") == ConditionType.FINISHED and c.get("status") == ConditionStatus.TRUE for c in conditions):
        return None
    c = cond.finished(finished.succeeded, finished.message, now_ms)
    condition: dict[str, Any] = {
        "type": str(c.type),
        "status": str(c.status),
        "reason": str(c.reason),
        "message": c.message,
        "lastTransitionTime": format_time(now_ms - now_ms % 1000),  # metav1.Time has whole seconds
    }
    if isinstance(meta.get("generation"), int):
        condition["observedGeneration"] = meta["generation"]
    kept = [dict(c) for c in conditions if c.get("type") != ConditionType.FINISHED]
    return {"metadata": {"resourceVersion": meta.get("resourceVersion")},
            "status": {"conditions": [*kept, condition]}}


def out_of_sync_status(workload: Mapping[str, Any], now_ms: int) -> dict[str, Any] | None:
    """The status patch marking a prebuilt Workload Finished, reason OutOfSync, as Kueue does when it
    no longer matches its job (``None``: already finished)."""
    name = str((workload.get("metadata") or {}).get("name") or "")
    patch = finished_status(workload, Finished(name, False, prebuiltplan.OUT_OF_SYNC_MESSAGE), now_ms)
    if patch is not None:
        patch["status"]["conditions"][-1]["reason"] = prebuiltplan.OUT_OF_SYNC_REASON
    return patch


# --- the I/O shell ---------------------------------------------------------------------------


class _Gone(Exception):
    """The watch's resourceVersion is too old (410): list again."""


@dataclass
class ReconcilerStats:
    WHOSE: ClassVar[str] = "the job reconciler's"
    suspended: int = 0
    rejected: int = 0
    workloads_created: int = 0
    finished_written: int = 0
    conflicts: int = 0
    relists: int = 0
    invalid: int = 0
    errors: int = 0


class _NamespaceTerminating(KubeApiError):
    """403: nothing new may be created in a namespace that is being deleted."""


def _status_error(what: str, status: int, raw: bytes) -> KubeApiError:
    reason, message, causes = "", "", []
    try:
        body = json.loads(raw)
        reason, message = str(body.get("reason", "")), str(body.get("message", ""))
        causes = [c.get("reason") for c in (body.get("details") or {}).get("causes") or []]
    except (ValueError, AttributeError):
        pass
    # The server's message may quote the object it refused: keep it short.
    text = f"{what}: HTTP {status} {reason}: {message[:300]}".rstrip(": ")
    kind = _NamespaceTerminating if status == 403 and "NamespaceTerminating" in causes else KubeApiError
    return kind(text, retriable=status_retriable(status), status=status, reason=reason)


async def _request(what: str, call: Awaitable[Any]) -> Any:
    """One API call made with ``_preload_content=False``: its JSON, or a :class:`KubeApiError`."""
    try:
        resp = await call
        try:
            raw = await resp.read()
        finally:
            resp.release()
    except ApiException as e:
        raise KubeApiError(f"{what}: HTTP {e.status} {e.reason}", retriable=status_retriable(e.status or 500),
                           status=e.status) from e
    except (TimeoutError, aiohttp.ClientError, OSError) as e:
        raise KubeApiError(f"{what}: {type(e).__name__}: {e}", retriable=True) from e
    if not 200 <= resp.status < 300:
        raise _status_error(what, resp.status, raw)
    try:
        return json.loads(raw)
    except ValueError as e:
        raise KubeApiError(f"{what}: the response is not JSON", retriable=True) from e


def _as_job(obj: Any) -> dict[str, Any]:
    """List items come without apiVersion/kind."""
    return {"apiVersion": "batch/v1", "kind": "Job", **obj} if isinstance(obj, dict) else {}


Key = tuple[str, str]


class JobReconciler:
    """List+watch of queued Jobs feeding ``workers`` workers, which plan and execute per Job.

    The watch keeps the newest version of every queued Job; the workers reconcile the Jobs
    whose keys they are handed, in order, each Job by one worker at a time (a Job that changes
    while it is reconciled is queued again when that pass ends), from that newest version. A failed
    retriable call is retried with a capped back-off; the watch relists on 410 Gone and on
    any interruption (capped back-off too), so a change missed meanwhile is seen on the list.
    """

    workers = 8  # Jobs reconciled at once (each Job by one worker at a time)

    def __init__(self, api: client.ApiClient, *, cluster: str, policy: Policy = "suspend",
                 clock: Callable[[], int] = _wall_clock_ms, watch_timeout_s: int = 300, t9k: bool = False) -> None:
        """``t9k``: also Jobs on a T9k Queue (named in the pod template, so every Job is watched)."""
        # Told of each Workload created, as the API server returned it (the actuator in the same
        # process keeps it: its first write to the Workload then needs no read).
        self.on_workload_created: Callable[[dict[str, Any]], None] | None = None
        # Told of each prebuilt Workload a job claims (adopted now or before), by namespace and name:
        # one admitted before its job existed is applied to the job then, as Kueue starts a suspended
        # job whose Workload is admitted (services.actuator.kube_port.KubePort.workload_adopted).
        self.on_workload_adopted: Callable[[str, str], None] | None = None
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {list(POLICIES)}, got {policy!r}")
        self.cluster, self.policy, self.clock, self.watch_timeout_s = cluster, policy, clock, watch_timeout_s
        self._selector: str | None = None if t9k else QUEUE_NAME_LABEL
        self.stats = ReconcilerStats()
        # Typed as Any: called with _preload_content=False, they return raw responses, not models.
        self._batch: Any = client.BatchV1Api(api)
        self._core: Any = client.CoreV1Api(api)
        self._custom: Any = client.CustomObjectsApi(api)
        self._scheduling: Any = client.SchedulingV1Api(api)
        self._jobs: dict[Key, dict[str, Any]] = {}
        self._listed = False  # the copies are complete (listed once): get() answers
        self._queue: asyncio.Queue[Key] = asyncio.Queue()
        self._queued: set[Key] = set()
        self._active: set[Key] = set()  # being reconciled by a worker
        self._dirty: set[Key] = set()  # changed while being reconciled: queued again when that ends
        self._attempts: dict[Key, int] = {}
        self._timers: dict[Key, asyncio.TimerHandle] = {}
        self._workload_done: set[str] = set()  # Job uids whose Workload is known to exist
        self._finished_done: set[str] = set()
        self._reported: dict[str, str] = {}  # Job uid -> the invalidity already reported
        self._log = _log.bind(cluster=cluster, policy=policy)
        self.what, self.kind_key = "Jobs", ("batch/v1", "Job")  # plural and (apiVersion, kind), for messages

    async def run(self, stop: asyncio.Event) -> ReconcilerStats:
        tasks = [asyncio.create_task(self._list_and_watch()),
                 *(asyncio.create_task(self._work()) for _ in range(self.workers))]
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
        for t in (*tasks, stopper):
            t.cancel()
        await asyncio.gather(*tasks, stopper, return_exceptions=True)
        for timer in self._timers.values():
            timer.cancel()
        for t in tasks:  # these loops only end by cancellation: anything else is a bug to surface
            if t in done and not t.cancelled() and t.exception() is not None:
                raise t.exception()  # type: ignore[misc]
        return self.stats

    # --- list + watch ---

    async def _list_and_watch(self) -> None:
        delay, listed_once = 0.2, False
        rv: str | None = None
        while True:
            try:
                if rv is None:
                    rv = await self._relist()
                    if listed_once:
                        self.stats.relists += 1
                    listed_once, delay = True, 0.2
                rv = await self._watch(rv)  # a clean end (server timeout): watch on from there
            except _Gone:
                self._log.info("job watch expired (410 Gone); relisting")
                rv = None
            except KubeApiError as e:
                self._log.warning("job list/watch interrupted; relisting after back-off", error=str(e),
                                  retry_in_s=delay)
                rv = None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)

    async def _relist(self) -> str:
        seen: dict[Key, dict[str, Any]] = {}
        token: str | None = None
        while True:
            page = await _request(f"list {self.what}", self._list(
                label_selector=self._selector, limit=500, _continue=token, _preload_content=False))
            for item in page.get("items") or []:
                job = self._as_obj(item)
                meta = job.get("metadata") or {}
                seen[(str(meta.get("namespace")), str(meta.get("name")))] = job
            token = (page.get("metadata") or {}).get("continue") or None
            if token is None:
                break
        self._jobs, self._listed = seen, True
        uids = {str((j.get("metadata") or {}).get("uid")) for j in seen.values()}
        self._workload_done &= uids
        self._finished_done &= uids
        self._reported = {u: m for u, m in self._reported.items() if u in uids}
        for key in seen:
            self._enqueue(key)
        return str((page.get("metadata") or {}).get("resourceVersion") or "")

    async def _watch(self, rv: str) -> str:
        try:
            resp = await self._list(
                label_selector=self._selector, watch=True, resource_version=rv, allow_watch_bookmarks=True,
                timeout_seconds=self.watch_timeout_s, _preload_content=False,
                _request_timeout=aiohttp.ClientTimeout(total=None, sock_read=self.watch_timeout_s + 30))
        except ApiException as e:
            raise KubeApiError(f"watch Jobs: HTTP {e.status} {e.reason}", retriable=True, status=e.status) from e
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            raise KubeApiError(f"watch Jobs: {type(e).__name__}: {e}", retriable=True) from e
        try:
            if resp.status == 410:
                raise _Gone
            if not 200 <= resp.status < 300:
                raise _status_error("watch Jobs", resp.status, await resp.read())
            async for line in watch_lines(resp):
                rv = self._on_event(json.loads(line), rv)
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            raise KubeApiError(f"watch Jobs cut: {type(e).__name__}: {e}", retriable=True) from e
        except ValueError as e:
            raise KubeApiError(f"watch Jobs: a malformed event: {e}", retriable=True) from e
        finally:
            resp.close()
        return rv

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The newest copy of the watched object ``namespace/name`` (for the actuator in this process,
        which then needs no watch of its own); None when not seen, or before the first list."""
        return self._jobs.get((namespace, name)) if self._listed else None

    def _on_event(self, event: Any, rv: str) -> str:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Gone
            raise _status_error("watch Jobs", int(obj.get("code") or 500), json.dumps(obj).encode())
        meta = obj.get("metadata") or {}
        new_rv = str(meta.get("resourceVersion") or rv)
        if kind == "BOOKMARK":
            return new_rv
        key = (str(meta.get("namespace")), str(meta.get("name")))
        if kind == "DELETED":
            self._jobs.pop(key, None)
            uid = str(meta.get("uid"))
            self._workload_done.discard(uid)
            self._finished_done.discard(uid)
            self._reported.pop(uid, None)
        elif kind in ("ADDED", "MODIFIED"):
            self._jobs[key] = self._as_obj(obj)
            self._enqueue(key)
        return new_rv

    # --- the worker ---

    def _enqueue(self, key: Key) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if key in self._active:  # one worker per Job at a time: again once this pass is over
            self._dirty.add(key)
            return
        if key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def _retry_later(self, key: Key) -> None:
        attempts = self._attempts.get(key, 0)
        self._attempts[key] = attempts + 1
        delay = min(0.5 * 2**attempts, 60.0)
        self._timers[key] = asyncio.get_running_loop().call_later(delay, self._enqueue, key)

    async def _work(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._active.add(key)
            try:
                await self._work_on(key)
            finally:
                self._active.discard(key)
                if key in self._dirty:
                    self._dirty.discard(key)
                    self._enqueue(key)

    async def _work_on(self, key: Key) -> None:
        log = self._log.bind(job=f"{key[0]}/{key[1]}")
        try:
            await self._reconcile(key)
            self._attempts.pop(key, None)
        except JobError as e:
            self.stats.invalid += 1
            log.warning("job cannot be read", error=str(e))
        except KubeApiError as e:
            self.stats.errors += 1
            if e.retriable:
                log.warning("job reconcile failed; will retry", error=str(e))
                self._retry_later(key)
            else:
                log.error("job reconcile failed", error=str(e))

    async def _reconcile(self, key: Key) -> None:
        job: dict[str, Any] | None = self._jobs.get(key)
        for _ in range(_MAX_ATTEMPTS):
            if job is None:
                return
            plan = self._plan(job)
            if plan.nothing_to_do:
                return
            try:
                job = await self._execute(plan)
            except _Conflict:
                self.stats.conflicts += 1
                job = await self._read_job(plan.job)
        raise KubeApiError(f"Job {key[0]}/{key[1]}: still changing after {_MAX_ATTEMPTS} attempts", retriable=True)

    async def _execute(self, plan: JobPlan) -> dict[str, Any] | None:
        """Carry out a plan; returns the Job to plan again with (after a suspend), else None."""
        ref = plan.job
        log = self._log.bind(job=str(ref), uid=ref.uid)
        if plan.reject is not None:
            await self._patch_job(ref, {"metadata": {"resourceVersion": ref.resource_version,
                                                     "labels": {REJECTED_LABEL: "true"},
                                                     "annotations": {REJECTION_ANNOTATION: plan.reject}}})
            self.stats.rejected += 1
            log.warning("queued job created running: rejected, not queued")
            await self._event(ref, "Warning", "Rejected", plan.reject)
            return None
        if plan.invalid is not None and self._reported.get(ref.uid) != str(plan.invalid):
            self.stats.invalid += 1
            log.warning("queued job cannot become a Workload", error=str(plan.invalid))
            await self._event(ref, "Warning", "InvalidJob", f"Not queued: {plan.invalid}")
            self._reported[ref.uid] = str(plan.invalid)
        if plan.suspend:
            patched = await self._patch_job(ref, self._suspend_patch(ref))
            self.stats.suspended += 1
            log.info("queued job suspended until admitted")
            await self._event(ref, "Normal", "Stopped", "Suspended: not admitted by a ClusterQueue yet")
            return patched
        if plan.workload is not None and ref.uid not in self._workload_done:
            await self._create_workload(ref, plan.workload)
        if plan.finished is not None and ref.uid not in self._finished_done:
            await self._write_finished(ref, plan.finished)
        return None

    # --- what another kind (services.actuator.kind_reconciler) changes ---

    def _list(self, **kwargs: Any) -> Any:
        return self._batch.list_job_for_all_namespaces(**kwargs)

    def _as_obj(self, item: Any) -> dict[str, Any]:
        return _as_job(item)

    def _plan(self, job: Mapping[str, Any]) -> JobPlan:
        return plan_job(job, policy=self.policy, cluster=self.cluster)

    def _suspend_patch(self, ref: JobRef) -> dict[str, Any]:
        return {"metadata": {"resourceVersion": ref.resource_version}, "spec": {"suspend": True}}

    def _patch_call(self, ref: JobRef, patch: dict[str, Any]) -> Any:
        return self._batch.patch_namespaced_job(ref.name, ref.namespace, patch, _content_type=MERGE_PATCH,
                                                _preload_content=False)

    def _read_call(self, ref: JobRef) -> Any:
        return self._batch.read_namespaced_job(ref.name, ref.namespace, _preload_content=False)

    # --- calls ---

    async def _patch_job(self, ref: JobRef, patch: dict[str, Any]) -> dict[str, Any]:
        try:
            return self._as_obj(await _request(f"patch {self.kind_key[1]} {ref}", self._patch_call(ref, patch)))
        except KubeApiError as e:
            if e.status == 409:
                raise _Conflict from e
            raise

    async def _read_job(self, ref: JobRef) -> dict[str, Any] | None:
        try:
            job = self._as_obj(await _request(f"read {self.kind_key[1]} {ref}", self._read_call(ref)))
        except KubeApiError as e:
            if e.status == 404:
                return None
            raise
        if (job.get("metadata") or {}).get("uid") != ref.uid:
            return None  # deleted and created again: the new one comes through the watch
        return job

    async def _resolve_priority(self, query: PriorityQuery) -> ResolvedPriority:
        if query.kind == "Queue":
            # The value only: Kueue's Workload knows no such class source (and its priority is the
            # Queue's, which the scheduler resolves itself from the Job).
            queue = await _request(f"read Queue {t9k.NAMESPACE}/{query.name}",
                                   self._custom.get_namespaced_custom_object(
                                       t9k.GROUP, "v1beta1", t9k.NAMESPACE, "queues", query.name,
                                       _preload_content=False))
            return ResolvedPriority(value=int((queue.get("spec") or {}).get("priority") or 0))
        if query.kind == "WorkloadPriorityClass":
            wpc = await _request(f"read WorkloadPriorityClass {query.name}", self._custom.get_cluster_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, WORKLOAD_PRIORITY_CLASSES, query.name, _preload_content=False))
            return ResolvedPriority(query.name, WORKLOAD_PRIORITY_CLASS_SOURCE, int(wpc.get("value") or 0))
        if query.name:
            pc = await _request(f"read PriorityClass {query.name}", self._scheduling.read_priority_class(
                query.name, _preload_content=False))
            return ResolvedPriority(query.name, POD_PRIORITY_CLASS_SOURCE, int(pc.get("value") or 0))
        listed = await _request("list PriorityClasses", self._scheduling.list_priority_class(_preload_content=False))
        return default_priority(list(listed.get("items") or []))

    async def _create_workload(self, ref: JobRef, draft: WorkloadDraft) -> None:
        if draft.prebuilt is not None:
            await self._adopt_workload(ref, draft, draft.prebuilt)
            self._workload_done.add(ref.uid)
            return
        try:
            priority = await self._resolve_priority(draft.priority)
        except KubeApiError as e:
            if e.status == 404:  # Kueue waits (and retries) until the class exists
                raise KubeApiError(f"Job {ref}: {e}; the Workload waits for it", retriable=True, status=404) from e
            raise
        try:
            created = await _request(f"create Workload {draft.namespace}/{draft.name}",
                                     self._custom.create_namespaced_custom_object(
                                         KUEUE_GROUP, KUEUE_VERSION, draft.namespace, WORKLOADS,
                                         draft.body_with(priority), _preload_content=False))
        except _NamespaceTerminating:
            self._log.info("no workload: the namespace is being deleted", job=str(ref))
        except KubeApiError as e:
            if e.status != 409:  # 409 here is AlreadyExists: the name is unique to this Job's uid
                raise
        else:
            self.stats.workloads_created += 1
            if self.on_workload_created is not None and isinstance(created, dict):
                self.on_workload_created(created)
            self._log.info("workload created", job=str(ref), workload=draft.name)
            await self._event(ref, "Normal", "CreatedWorkload", f"Created Workload: {draft.namespace}/{draft.name}")
        self._workload_done.add(ref.uid)

    async def _adopt_workload(self, ref: JobRef, draft: WorkloadDraft, own: o.Workload) -> None:
        """The prebuilt Workload the job names: adopted, or left to its controller, or marked
        Finished (OutOfSync); a missing one is waited for (a retriable error: the job stays held)."""
        what = f"Workload {draft.namespace}/{draft.name}"
        shown = f"{self.kind_key[1]} {ref}"
        for _ in range(_MAX_ATTEMPTS):
            try:
                wl = await _request(f"read {what}", self._custom.get_namespaced_custom_object(
                    KUEUE_GROUP, KUEUE_VERSION, draft.namespace, WORKLOADS, draft.name, _preload_content=False))
            except KubeApiError as e:
                if e.status == 404:
                    raise KubeApiError(f"{shown}: the prebuilt {what} does not exist; the job waits for it",
                                       retriable=True, status=404) from e
                raise
            plan = prebuiltplan.adoption(wl, own, draft.body["metadata"]["ownerReferences"][0])
            if plan.foreign:
                self._log.warning("prebuilt workload not adopted", job=str(ref), reason=plan.foreign)
                await self._event(ref, "Warning", "PrebuiltWorkloadNotAdopted", plan.foreign)
                return
            try:
                if plan.patch is not None:
                    wl = await _request(f"adopt {what}", self._custom.patch_namespaced_custom_object(
                        KUEUE_GROUP, KUEUE_VERSION, draft.namespace, WORKLOADS, draft.name, plan.patch,
                        _content_type=MERGE_PATCH, _preload_content=False))
                    self.stats.workloads_created += 1
                    self._log.info("prebuilt workload adopted", job=str(ref), workload=draft.name)
                    await self._event(ref, "Normal", "AdoptedWorkload", f"Adopted prebuilt Workload: {what}")
                status = out_of_sync_status(wl, self.clock()) if plan.out_of_sync else None
                if status is not None:
                    await _request(f"write Finished on {what}", self._custom.patch_namespaced_custom_object_status(
                        KUEUE_GROUP, KUEUE_VERSION, draft.namespace, WORKLOADS, draft.name, status,
                        _content_type=MERGE_PATCH, _preload_content=False))
                    self._log.warning("prebuilt workload out of sync", job=str(ref), reason=plan.out_of_sync)
                    await self._event(ref, "Warning", "OutOfSync", f"{prebuiltplan.OUT_OF_SYNC_MESSAGE}: "
                                                                   f"{plan.out_of_sync}")
                elif not plan.out_of_sync and self.on_workload_adopted is not None:
                    self.on_workload_adopted(draft.namespace, draft.name)
            except KubeApiError as e:
                if e.status == 409:
                    self.stats.conflicts += 1
                    continue
                raise
            return
        raise KubeApiError(f"{what}: still changing after {_MAX_ATTEMPTS} attempts", retriable=True)

    async def _delete_requests(self, namespace: str, wl: Mapping[str, Any]) -> None:
        """Kueue deletes a finished workload's ProvisioningRequests (and their PodTemplates)."""
        for request, templates in checkplan.finished_requests(wl):
            await self._delete_gone_ok(f"delete ProvisioningRequest {namespace}/{request}",
                                       self._custom.delete_namespaced_custom_object, checkplan.PR_GROUP, "v1",
                                       namespace, "provisioningrequests", request)
            for t in templates:
                await self._delete_gone_ok(f"delete PodTemplate {namespace}/{t}",
                                           self._core.delete_namespaced_pod_template, t, namespace)

    @staticmethod
    async def _delete_gone_ok(what: str, fn: Callable[..., Awaitable[Any]], *args: str) -> None:
        try:
            await _request(what, fn(*args, _preload_content=False))
        except KubeApiError as e:
            if e.status != 404:
                raise

    async def _write_finished(self, ref: JobRef, finished: Finished) -> None:
        what = f"Workload {ref.namespace}/{finished.workload}"
        for _ in range(_MAX_ATTEMPTS):
            try:
                wl = await _request(f"read {what}", self._custom.get_namespaced_custom_object(
                    KUEUE_GROUP, KUEUE_VERSION, ref.namespace, WORKLOADS, finished.workload, _preload_content=False))
            except KubeApiError as e:
                if e.status != 404:
                    raise
                self._finished_done.add(ref.uid)  # none to finish (Kueue ignores NotFound too)
                return
            patch = finished_status(wl, finished, self.clock())
            if patch is not None:
                try:
                    await _request(f"write Finished on {what}", self._custom.patch_namespaced_custom_object_status(
                        KUEUE_GROUP, KUEUE_VERSION, ref.namespace, WORKLOADS, finished.workload, patch,
                        _content_type=MERGE_PATCH, _preload_content=False))
                except KubeApiError as e:
                    if e.status == 409:
                        self.stats.conflicts += 1
                        continue
                    raise
                self.stats.finished_written += 1
                self._log.info("workload finished", job=str(ref), workload=finished.workload,
                               succeeded=finished.succeeded)
                await self._delete_requests(ref.namespace, wl)
                await self._event(ref, "Normal", "FinishedWorkload",
                                  f"Workload '{ref.namespace}/{finished.workload}' is declared finished")
            self._finished_done.add(ref.uid)
            return
        raise KubeApiError(f"{what}: status still changing after {_MAX_ATTEMPTS} attempts", retriable=True)

    async def _event(self, ref: JobRef, type_: str, reason: str, message: str) -> None:
        """Record a core/v1 Event on the Job; best effort, as client-go's recorder is."""
        now = format_time(self.clock() // 1000 * 1000)
        body = {
            "metadata": {"generateName": f"{ref.name}.", "namespace": ref.namespace},
            "involvedObject": {"apiVersion": self.kind_key[0], "kind": self.kind_key[1], "name": ref.name,
                               "namespace": ref.namespace, "uid": ref.uid},
            "type": type_, "reason": reason, "message": message[:1024],
            "source": {"component": COMPONENT},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "reportingComponent": COMPONENT, "reportingInstance": f"{COMPONENT}-{self.cluster}"[:128],
        }
        try:
            await _request(f"record Event on Job {ref}", self._core.create_namespaced_event(
                ref.namespace, body, _preload_content=False))
        except KubeApiError as e:
            self._log.warning("could not record event", job=str(ref), reason=reason, error=str(e))


class _Conflict(Exception):
    """A write's resourceVersion precondition failed (409): read again, plan again."""


__all__ = [
    "Finished", "JobError",
    "JobPlan", "JobReconciler", "JobRef", "KubeApiError", "PriorityQuery", "ReconcilerStats", "ResolvedPriority",
    "WorkloadDraft", "default_priority", "finished_status", "plan_job", "rejection_message",
]
