"""The Kubernetes actuation port: the scheduler's decisions become idempotent API writes.

What each decision does (mirroring Kueue's job reconciler and Workload API):

- ``AdmitWorkload``: find the ``kueue.x-k8s.io/v1beta2`` Workload and, through its ownerReference,
  the ``batch/v1`` Job. Inject the assigned ResourceFlavors' ``nodeLabels`` (as ``nodeSelector``)
  and ``tolerations`` into the Job's pod template, keeping the template's own in annotation
  ``kueuelog.io/original-pod-scheduling`` (Kueue keeps "podset info" for the same purpose), set
  ``spec.suspend=false`` and record the decision in ``kueuelog.io/decision-id`` (its cycle in
  ``kueuelog.io/decision-cycle``). Then write the Workload's ``status.admission`` and conditions
  ``QuotaReserved=True`` and ``Admitted=True``, with the texts of
  :mod:`events.conditions` (the ones ``simulate`` renders).
- ``EvictWorkload``: suspend the Job, set ``kueuelog.io/evicted``, restore the original template
  once the Job may be changed (Kubernetes lets a Job's scheduling directives change only while
  it is suspended and not started: in a real cluster that is after the job controller stopped
  its pods, so the restore may come some steps later), and write ``Evicted``, ``Preempted``
  (when the decision has a preemption reason), ``QuotaReserved=False``, ``Admitted=False``,
  ``Requeued`` and no ``status.admission``. Kueue writes the last three when the eviction
  completes; we write them at once and the watcher reports ``EvictionCompleted`` when the Job
  has no active pods. A Workload nothing owns (:mod:`services.actuator.standalone`) gets only
  ``Evicted`` / ``Preempted`` and ``kueuelog.io/evicted`` on itself: whatever runs it clears its
  reservation, and the watcher reports that as the completion.
- ``DeactivateWorkload`` (an eviction that deactivates): the same, then the Workload's
  ``spec.active=false``, as Kueue's workload controller writes it.
- ``MarkPending``: the Workload's ``QuotaReserved=False`` condition (with the reason the decision
  carries: Kueue's granular one, ``services/core/reasons.py``) and our closed-set reason in
  ``kueuelog.io/pending-reason``, only when they changed (a cache of what was written spares the
  calls). A pending mark is status, not an order: it is queued, and before each batch up to
  ``marks_per_step`` queued marks are written, ``marks_when_behind`` while the loop is behind (the
  newest of each workload's: a workload marked again before then costs one write, not two), so
  orders never wait behind a backlog of marks. Marks are written at ``marks_per_second`` on
  average, ``marks_per_second_throttled`` while the rate limit bites (a call waited for it in the
  last ``throttled_window`` seconds).
  Each is a merge patch from the newest copy of the Workload at hand, watched or written (no read
  first: one call, two when the closed-set reason changed too); a copy another writer made stale is
  refused with 409 Conflict, then the Workload is read and the patch made again. A mark that cannot
  be written yet (no Workload object yet) is retried before later batches until a newer decision
  for the workload replaces it. At recovery each waiting workload's last mark is queued again.
- ``UpdateWorkloadStatus`` (status only): the Workload's ``status.admissionChecks`` and
  ``status.requeueState`` as they change between reservation and admission (a check Pending with
  its message, Ready, Retry, Rejected; a back-off set or over), compared before written.
- After every batch, each ClusterQueue / LocalQueue whose counts (:class:`QueueCounts`, rebuilt
  from the decisions before the committed position at recovery) changed gets its status written,
  8 queues at a time, each at most every ``queue_status_seconds`` (``queue_status_seconds_throttled``
  while the rate limit bites; a queue that must wait is written
  by a later step: the loop keeps stepping while any waits).

Reads come from watched copies (:mod:`services.actuator.informer`, run by :meth:`KubePort.watch`):
the Workloads, the queues, the queued Jobs (the job reconciler's copies where it runs in the same
process: :meth:`KubePort.use_job_copies`), and the objects of each kind that may claim a prebuilt
Workload, by the name they claim. A Job created after its prebuilt Workload was admitted gets the
admission once its reconciler adopts the Workload (:meth:`KubePort.workload_adopted`). An
admission or eviction reads the Workload (and lists claimants) only when the copies do not have it
yet, or after a 409 Conflict showed a copy stale: a standalone Workload's admission is one call.
Kueue's manager reads from its informers' caches the same way.

Exactly once, in effect. The loop (:mod:`services.actuator.loop`) deduplicates decisions by
its watermark and commits reports with its position; each write here is idempotent: the Job
records the decision it carries, so one it already shows — or a newer cycle's — is not applied
again, and Workload status is compared before it is written. Every write is a JSON merge patch
with the ``resourceVersion`` of the read, so a concurrent writer makes it fail with 409
Conflict; then we re-read and try again, up to ``max_conflicts`` times.

Failures are :class:`~services.actuator.loop.ActuationError` (see :mod:`services.actuator.kubeapi`
for which are retriable); the loop retries and reports them. A missing Workload or Job is
retriable for an admission (the job reconciler creates the Workload after the Job) but not for
an eviction (it existed when it was admitted: it is gone, and nothing runs). API calls are rate
limited (``qps`` / ``burst``) and counted with their latency in ``stats.api``.

The pure parts (patches, status payloads, :class:`QueueCounts`) are in
:mod:`services.actuator.kubeplan`; this module is the shell that reads and writes.
"""
from __future__ import annotations

import asyncio
import functools
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import structlog
from kubernetes_asyncio import client

from events import jobkinds
from events.cluster import ORIGINAL_POD_SCHEDULING_ANNOTATION as ANN_ORIGINAL
from events.cluster import PENDING_REASON_ANNOTATION, PREBUILT_WORKLOAD_LABEL, QUEUE_NAME_LABEL
from events.jobkinds import prebuilt
from events.messages import (
    AdmitChecked,
    AdmitWorkload,
    AnyDecision,
    DeactivateWorkload,
    EvictWorkload,
    MarkPending,
    UpdateLocalQueueFairSharing,
    UpdateWorkloadStatus,
)
from services.actuator import checkplan
from services.actuator.informer import Copies, Informer, resource_version_newer
from services.actuator.kindplan import kind_admit_ops, kind_evict_ops
from services.actuator.kubeapi import ApiStats, InvalidObject, KubeApiError, KubeCalls, Ref
from services.actuator.kubeplan import (
    Decision,
    FlavorQuotas,
    FlavorScheduling,
    Json,
    QueueCounts,
    admitted_status,
    annotations_of,
    checked_status,
    cluster_queue_ref,
    evicted_status,
    fair_sharing_status_patch,
    flavor_names,
    flavor_quotas,
    flavor_ref,
    flavor_scheduling,
    holds_quota,
    idempotency,
    is_finished,
    job_admit_patch,
    job_evict_patch,
    job_finished,
    job_ref,
    job_restore_patch,
    local_queue_ref,
    may_restore,
    merged_scheduling,
    news_status,
    pending_status,
    queue_status_patch,
    resource_version,
    status_patch,
    t9k_queue_ref,
    workload_ref,
)
from services.actuator.loop import ActuationError, Staged, Tuning
from services.actuator.podgroups import is_pod_workload, release_pods, stop_pods
from services.actuator.standalone import evicted_mark_patch, evicting_status, is_standalone

_log = structlog.get_logger(__name__)

KUBE_TUNING: Final = Tuning(batch_size=1000, max_attempts=10, retry_base_seconds=0.2, retry_max_seconds=10.0,
                            concurrency=32)
"""API calls are slow and rate limited: a commit every 1,000 decisions (most are cycle records and
pending marks, which cost no call in the batch; each step's pending marks, queue statuses and commit
are paid per batch), up to 32 workloads' decisions in flight at once (the rate limit is shared), and
a back-off between attempts."""


@dataclass
class KubeStats:
    """What the port counts beyond the loop's :class:`~services.actuator.loop.Stats`."""

    already_applied: int = 0  # the Job showed the decision already (a redo after a crash)
    stale: int = 0  # the Job showed a newer cycle's decision (reported applied: the loop counts it started/stopped)
    pending_written: int = 0
    pending_unchanged: int = 0
    pending_dropped: int = 0
    pending_superseded: int = 0  # queued marks replaced by a newer one of the workload before written
    conflicts: int = 0
    restores: int = 0
    queue_status_writes: int = 0
    provisioning_requests: int = 0  # ProvisioningRequests created (not found there already)
    status_writes: int = 0  # status-only decisions written (or found written)
    cached_reads: int = 0  # Workloads and prebuilt claimants answered by the watched copies, not a call
    adopted_reapplied: int = 0  # admissions applied again once a job claimed the Workload (found applied, too)
    api: ApiStats = field(default_factory=ApiStats)

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "api"}
        out["api"] = self.api.as_dict()
        return out


@dataclass
class _Later:
    """Work that must not hold up the line: a pending mark not yet written, a template to restore."""

    attempts: int
    due: float
    decision: MarkPending | None = None
    job: Ref | None = None


class KubePort:
    """Applies decisions to one cluster's API server (see the module docstring)."""

    takes_pending_marks: Final = True
    marks_per_step = 8  # pending marks written before each batch at most: the newest of each workload's,
    marks_at_once = 8  # oldest workload first, this many in flight
    marks_when_behind = 2  # ... while the loop is behind_at decisions or more behind: orders first
    behind_at = 100
    marks_per_second = 5.0  # and no more than this on average: a fresh mark is up to three calls
    queue_status_seconds = 5.0  # a ClusterQueue's or LocalQueue's status is written at most this often
    # While the rate limit bites (a call waited for it within ``throttled_window`` seconds), status
    # yields to orders: marks at this rate, and each queue's status at most this often.
    throttled_window = 5.0
    marks_per_second_throttled = 1.0
    queue_status_seconds_throttled = 30.0
    # Admissions written to a Workload alone (nothing claimed it yet), kept for a job that claims it
    # later, the newest this many (~0.7 kB each).
    admissions_kept = 20_000

    def __init__(self, api: client.ApiClient, *, cluster: str, qps: float = 20, burst: int = 40,
                 request_timeout: float = 10.0, max_conflicts: int = 5, flavor_ttl_seconds: float = 10.0,
                 pending_cache_size: int = 100_000, tuning: Tuning = KUBE_TUNING, t9k: bool = False) -> None:
        """``t9k``: a ClusterQueue that is a T9k Queue gets the Queue's ``status.allocated`` written."""
        self.cluster, self.t9k = cluster, t9k
        self.tuning = tuning
        self.max_conflicts = max_conflicts
        self.flavor_ttl_seconds = flavor_ttl_seconds
        self.pending_cache_size = pending_cache_size
        self.stats = KubeStats()
        self.kube = KubeCalls(api, qps=qps, burst=burst, request_timeout=request_timeout, stats=self.stats.api)
        self._api = api  # pods (services/actuator/pods.py) are on /api/v1, which KubeCalls does not reach
        self.counts = QueueCounts()
        self._later: dict[str, _Later] = {}  # "pending:ns/name" / "restore:ns/name"
        self._mark_credit, self._credit_at = float(self.marks_per_step), time.monotonic()
        self._queue_written: dict[str, float] = {}  # queue ref -> when its status was last written
        # Pending marks not written yet: each workload's newest, in the order the workloads were first marked.
        self._marks: OrderedDict[str, MarkPending] = OrderedDict()
        self._pending_cache: OrderedDict[str, tuple[str, str, str]] = OrderedDict()
        # The last copy of each Workload read or written (its resourceVersion, annotations and status):
        # a pending mark patches from it without a read; a stale copy is a 409 Conflict, then a read.
        self._seen: OrderedDict[str, Json] = OrderedDict()
        self._flavors: dict[str, tuple[float, FlavorScheduling]] = {}
        self._queues: dict[str, tuple[float, Json]] = {}  # ClusterQueue / LocalQueue copies, when read or written
        self._quotas: dict[str, FlavorQuotas] = {}
        self._not_served: dict[str, float] = {}  # workload kinds whose list was a 404, when
        # A Workload nothing owns found unclaimed, by (decision id, resourceVersion): an admission or
        # eviction asks for a Job claiming it, then another kind, and one lookup answers both.
        self._unclaimed: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._served: set[str] = set()  # workload kinds a claimant lookup listed (so they are served)
        self._probing: dict[str, asyncio.Lock] = {}  # per kind not known to be served: one lookup at a time
        # A scaled-up elastic Job's workload slices ("ns/slice") -> the name of the Job's Workload
        # object, which stands for every slice of the Job on the cluster (services/core/scaleup.py).
        self._slices: dict[str, str] = {}
        # Each workload's last admission written to the Workload alone and not evicted since
        # ("ns/name"; after a restart every admission recovered), and the workloads a job claimed
        # since (a prebuilt Workload adopted), to apply it to that job (see workload_adopted).
        self._admissions: OrderedDict[str, AdmitWorkload | AdmitChecked] = OrderedDict()
        self._adopted: dict[str, int] = {}  # "ns/name" -> attempts so far
        # Watched copies (run by watch()): the Workloads, and per kind that may claim a prebuilt
        # Workload the objects naming one, by that name. Until one has listed, the port reads.
        self.workloads = Informer(api, workload_ref("", ""))
        self.claimants = {kind.kind: Informer(api, Ref(kind.kind, kind.group, kind.version, kind.plural, ""),
                                              label_selector=PREBUILT_WORKLOAD_LABEL, index=_prebuilt_name)
                          for kind in jobkinds.KINDS if kind.key in prebuilt.SUPPORTED}
        # The queued Jobs (the job reconciler's selector), whose Workloads the decisions are about;
        # the job reconciler's own copies instead where it runs in this process (use_job_copies).
        self.jobs: Copies = Informer(api, job_ref("", ""), label_selector="" if t9k else QUEUE_NAME_LABEL)
        # ClusterQueues and LocalQueues: their quotas and status, read before their status is written.
        self.queues = {"ClusterQueue": Informer(api, cluster_queue_ref("")),
                       "LocalQueue": Informer(api, local_queue_ref("", ""))}

    def use_job_copies(self, copies: Copies) -> None:
        """Read the queued Jobs from ``copies`` (the job reconciler in this process keeps every
        queued Job, newest version) rather than watch them a second time."""
        self.jobs = copies

    @property
    def informers(self) -> dict[str, Informer]:
        """Every watch of the port's own by a name for its counters: ``workloads``, ``jobs`` (unless
        it reads another's copies), ``clusterqueues``, ``localqueues``, and ``claimant_<plural>``
        per kind that may claim a prebuilt Workload."""
        out = {"workloads": self.workloads}
        if isinstance(self.jobs, Informer):
            out["jobs"] = self.jobs
        out.update((i.ref.plural, i) for i in self.queues.values())
        out.update((f"claimant_{i.ref.plural}", i) for i in self.claimants.values())
        return out

    async def watch(self, stop: asyncio.Event) -> None:
        """Keep the watched copies until ``stop`` (the actuator's process runs this beside the loop)."""
        async with asyncio.TaskGroup() as group:
            for informer in self.informers.values():
                group.create_task(informer.run(stop), name=f"watch {informer.what}")

    # --- the port's calls -----------------------------------------------------------------------

    def recover(self, history: Iterator[AnyDecision]) -> None:
        """The ClusterQueue / LocalQueue counts from every decision before the committed position,
        and each waiting workload's last pending mark, to be written (or found written) again: a
        mark behind the committed position may not have been written before a crash."""
        self.counts = QueueCounts()
        self._slices = {}
        self._marks = OrderedDict()
        self._admissions = OrderedDict()
        for d in history:
            if isinstance(d, AdmitWorkload | AdmitChecked | EvictWorkload | MarkPending):
                self._learn_slice(d)
                self.counts.fold(d)
                key = f"{d.namespace}/{d.name}"
                self._marks.pop(key, None)
                if isinstance(d, MarkPending):
                    self._marks[key] = d
                self._remember_admission(d)

    @property
    def deferred_marks(self) -> int:
        """Pending marks not written yet (the loop keeps stepping while there are any)."""
        return len(self._marks)

    @property
    def deferred_queues(self) -> int:
        """Queue statuses waiting for their turn (``queue_status_seconds``; the loop keeps stepping)."""
        return len(self.counts.dirty_cluster_queues) + len(self.counts.dirty_local_queues)

    @property
    def deferred(self) -> int:
        """Pending marks, queue statuses and adopted Workloads' admissions waiting for their turn
        (the loop keeps stepping)."""
        return self.deferred_marks + self.deferred_queues + len(self._adopted)

    async def before_batch(self, batch: int) -> None:
        """Restores due; then up to ``marks_per_step`` pending marks (``marks_when_behind`` while the
        loop is behind: a batch of ``behind_at`` decisions or more), ``marks_at_once`` at a time: the
        retries that are due first, then the queued marks, oldest workload first. Behind, most marks
        would be written for workloads admitted a moment later (an admission drops its workload's
        queued mark), at the cost of orders. With no batch and only deferred work, it waits a moment
        first (the loop's driver keeps stepping while there is any: it must not spin)."""
        behind, idle = batch >= self.behind_at, batch == 0
        now = time.monotonic()
        rate = self.marks_per_second_throttled if self.kube.throttled(self.throttled_window) else self.marks_per_second
        self._mark_credit = min(float(self.marks_per_step), self._mark_credit + (now - self._credit_at) * rate)
        self._credit_at = now
        if idle and self.deferred:
            await asyncio.sleep(0.25)
        await self._apply_adopted()
        due = await self._do_later()
        budget = min(self.marks_when_behind if behind else self.marks_per_step, int(self._mark_credit))
        fresh = [self._marks.popitem(last=False)[1]
                 for _ in range(min(max(budget - len(due), 0), len(self._marks)))]
        self._mark_credit -= len(fresh)
        await self._at_once([functools.partial(self._retry_pending, item) for item in due]
                            + [functools.partial(self._mark_pending, d) for d in fresh])

    async def start(self, decision: AdmitWorkload | AdmitChecked) -> Sequence[Staged]:
        self._learn_slice(decision)
        self._remember_admission(decision)  # (before the calls: a job may claim it meanwhile)
        await self._admit(decision)
        if isinstance(decision, AdmitWorkload) and decision.provisioning_requests:
            await self._create_requests(decision)
        self._applied(decision)
        return ()

    async def stop(self, decision: EvictWorkload) -> Sequence[Staged]:
        self._remember_admission(decision)
        await self._evict(decision)
        if decision.provisioning_requests:
            await self._delete_requests(decision)
        self._applied(decision)
        return ()

    def workload_adopted(self, namespace: str, name: str) -> None:
        """A job claims the prebuilt Workload ``namespace/name`` (its reconciler, in this process,
        adopted it). If the Workload was admitted before the job existed, its admission was written
        to the Workload alone: it is applied again, to the job this time, before the next batch, as
        Kueue's reconciler starts a suspended job whose Workload is admitted. (A job that already
        shows the admission costs one read of the Workload.)"""
        key = f"{namespace}/{name}"
        if key in self._admissions:
            self._adopted.setdefault(key, 0)

    def _remember_admission(self, d: AdmitWorkload | AdmitChecked | EvictWorkload | MarkPending) -> None:
        key = f"{d.namespace}/{d.name}"
        if isinstance(d, EvictWorkload):
            self._admissions.pop(key, None)
            self._adopted.pop(key, None)
        elif isinstance(d, AdmitWorkload | AdmitChecked):
            self._admissions[key] = d
            self._admissions.move_to_end(key)
            while len(self._admissions) > self.admissions_kept:
                self._admissions.popitem(last=False)

    async def _apply_adopted(self) -> None:
        """Each adopted Workload's admission, applied to the job that claimed it (see
        :meth:`workload_adopted`) while the Workload still holds that admission and runs."""
        for key in sorted(self._adopted):
            d = self._admissions.get(key)
            attempts = self._adopted.pop(key)
            if d is None:
                continue
            try:
                wl = await self._workload(d, fresh=True)
                admitted_to = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue")
                if holds_quota(wl) and not is_finished(wl) and admitted_to == d.admission.cluster_queue:
                    await self._admit(d)
                    self.stats.adopted_reapplied += 1
            except ActuationError as e:
                if e.retriable and attempts + 1 < self.tuning.max_attempts:
                    self._adopted[key] = attempts + 1
                else:
                    _log.warning("admission not applied to the job that claimed its Workload", decision=d.id,
                                 workload=key, error=str(e), attempts=attempts + 1)

    async def mark_pending(self, decision: MarkPending) -> None:
        """Queued, not written: a pending mark is status, not an order, so orders go first and a
        workload marked again before its mark was written costs no call for the older one."""
        key = f"{decision.namespace}/{decision.name}"
        self._later.pop(f"pending:{key}", None)
        if key in self._marks:
            self.stats.pending_superseded += 1
        self._marks[key] = decision  # (keeps the workload's place in line)
        self.counts.fold(decision)

    async def _at_once(self, calls: Sequence[Callable[[], Awaitable[None]]]) -> None:
        """Each call (which never raises :class:`ActuationError`), ``marks_at_once`` at a time."""
        if self.marks_at_once <= 1 or len(calls) <= 1:
            for call in calls:
                await call()
            return
        gate = asyncio.Semaphore(self.marks_at_once)

        async def one(call: Callable[[], Awaitable[None]]) -> None:
            async with gate:
                await call()

        async with asyncio.TaskGroup() as group:
            for call in calls:
                group.create_task(one(call))

    async def write_status(self, decision: UpdateWorkloadStatus | UpdateLocalQueueFairSharing) -> None:
        """The Workload's admission checks and requeueState, or a LocalQueue's admission fair
        sharing status (compared before written: idempotent)."""
        if isinstance(decision, UpdateLocalQueueFairSharing):
            await self._write_fair_sharing(decision)
            return
        ref = self._ref(decision.namespace, decision.name)
        for _ in range(self.max_conflicts):
            # Gone: finished and deleted, nothing to tell (not retriable, the loop moves on).
            wl = await self.kube.get(ref, not_found_retriable=False)
            if await self._write_status(ref, wl, news_status(wl.get("status") or {}, decision)):
                self.stats.status_writes += 1
                return
        raise KubeApiError(f"status of Workload {decision.namespace}/{decision.name}: still conflicting after "
                           f"{self.max_conflicts} re-reads", retriable=True, status=409)

    async def after_batch(self) -> None:
        await self._flush_queues()

    async def _write_fair_sharing(self, d: UpdateLocalQueueFairSharing) -> None:
        """The LocalQueue's ``status.fairSharing.admissionFairSharingStatus`` through the status
        subresource; a LocalQueue that is gone has nothing to tell (not retriable)."""
        ref = local_queue_ref(d.namespace, d.name)
        patch = fair_sharing_status_patch(await self.kube.get(ref, not_found_retriable=False), d)
        if patch is not None:
            await self.kube.patch(ref, patch, status=True)
            self.stats.queue_status_writes += 1

    def _applied(self, d: AdmitWorkload | AdmitChecked | EvictWorkload) -> None:
        key = f"{d.namespace}/{d.name}"
        self._later.pop(f"pending:{key}", None)
        self._marks.pop(key, None)  # the newer decision replaces a mark not written yet
        self._pending_cache.pop(key, None)  # a pending mark after this one is news again
        self.counts.fold(d)

    # --- the objects ----------------------------------------------------------------------------

    def _learn_slice(self, d: AdmitWorkload | AdmitChecked | EvictWorkload | MarkPending) -> None:
        """An elastic Job's new workload slice is the Job's Workload object on the cluster: the Job
        keeps running, the object shows the newest slice's admission (Kueue creates an object per
        slice; the job reconciler here keeps one per Job)."""
        if isinstance(d, AdmitWorkload) and d.replaced_slice:
            replaced = d.replaced_slice
            self._slices[f"{d.namespace}/{d.name}"] = self._slices.get(replaced, replaced.partition("/")[2])

    def _ref(self, namespace: str, name: str) -> Ref:
        """The Workload object a decision about ``namespace/name`` is written to."""
        return workload_ref(namespace, self._slices.get(f"{namespace}/{name}", name))

    def _watched(self, ref: Ref) -> Json | None:
        """The watched copy of a Workload; None when there is none, or when this port wrote a newer
        one since (the watch is behind: read it, rather than write from the old copy and be refused)."""
        wl = self.workloads.get(ref.namespace, ref.name)
        seen = self._seen.get(str(ref))
        if wl is None or (seen is not None and resource_version_newer(resource_version(seen), resource_version(wl))):
            return None
        return wl

    async def _workload(self, d: Decision, *, fresh: bool = False) -> Json:
        """The Workload: its watched copy, or read (``fresh``: always read, after a conflict)."""
        # Missing before an admission: not created yet, wait for it. Missing at an eviction: it was
        # there when admitted, so it is gone (finished and deleted) and there is nothing to stop.
        ref = self._ref(d.namespace, d.name)
        if not fresh and (wl := self._watched(ref)) is not None:
            self.stats.cached_reads += 1
            self._learn_queue(d, wl)
            return wl
        try:
            wl = await self.kube.get(ref, not_found_retriable=not isinstance(d, EvictWorkload))
        except KubeApiError:
            self._seen.pop(str(ref), None)
            raise
        self._remember_workload(ref, wl)
        self._learn_queue(d, wl)
        return wl

    def _learn_queue(self, d: Decision, wl: Json) -> None:
        queue = (wl.get("spec") or {}).get("queueName")
        if isinstance(queue, str) and queue:
            self.counts.learn_local_queue(f"{d.namespace}/{d.name}", f"{d.namespace}/{queue}")

    async def _job_of(self, wl: Json, d: Decision, *, fresh: bool = False) -> tuple[Ref, Json] | None:
        """The Job that owns the Workload; None for a Workload no Job owns (only its status is written)."""
        owners = [r for r in (wl.get("metadata") or {}).get("ownerReferences") or []
                  if isinstance(r, dict) and r.get("apiVersion") == "batch/v1" and r.get("kind") == "Job"]
        owners.sort(key=lambda r: not r.get("controller"))
        if not owners:
            claimant = await self._claimant(wl, d, fresh=fresh)
            return (claimant[1], claimant[2]) if claimant is not None and claimant[0] is jobkinds.JOB else None
        ref = job_ref(d.namespace, str(owners[0].get("name")))
        job = None if fresh else self.jobs.get(ref.namespace, ref.name)
        if job is not None:
            self.stats.cached_reads += 1
        else:
            job = await self.kube.get(ref, not_found_retriable=not isinstance(d, EvictWorkload))
        uid = (job.get("metadata") or {}).get("uid")
        if owners[0].get("uid") and uid != owners[0]["uid"]:
            raise InvalidObject(f"Workload {d.namespace}/{d.name}", "metadata.ownerReferences",
                                f"names {ref} with uid {owners[0]['uid']}, but that Job has uid {uid} (recreated)")
        return ref, job

    async def _kind_owner(self, wl: Json, d: Decision, *, fresh: bool = False
                          ) -> tuple[jobkinds.JobKind, Ref, Json] | None:
        """The object of a workload kind besides Job (a JobSet, a PyTorchJob, ...) that owns the Workload."""
        for r in (wl.get("metadata") or {}).get("ownerReferences") or []:
            if not isinstance(r, dict):
                continue
            kind = jobkinds.kind_of(str(r.get("apiVersion", "")), str(r.get("kind", "")))
            if kind is None or kind.key == jobkinds.JOB.key:
                continue
            ref = Ref(kind.kind, kind.group, kind.version, kind.plural, str(r.get("name")), d.namespace)
            obj = await self.kube.get(ref, not_found_retriable=not isinstance(d, EvictWorkload))
            uid = (obj.get("metadata") or {}).get("uid")
            if r.get("uid") and uid != r["uid"]:
                raise InvalidObject(f"Workload {d.namespace}/{d.name}", "metadata.ownerReferences",
                                    f"names {ref} with uid {r['uid']}, but that object has uid {uid} (recreated)")
            return kind, ref, obj
        claimant = await self._claimant(wl, d, fresh=fresh)
        return claimant if claimant is not None and claimant[0] is not jobkinds.JOB else None

    async def _claimant(self, wl: Json, d: Decision, *, fresh: bool) -> tuple[jobkinds.JobKind, Ref, Json] | None:
        """A Workload nothing owns yet may be the prebuilt Workload of a job
        (``kueue.x-k8s.io/prebuilt-workload-name``) that its reconciler has not adopted yet: that job
        takes the decision. Looked up by label (a name past 63 characters is only found once adopted)
        among the watched copies, listed when not watched yet or ``fresh`` (after a conflict); a kind
        whose CRD is not served, or that the actuator may not list (not enabled), is skipped."""
        if (wl.get("metadata") or {}).get("ownerReferences") or len(d.name) > prebuilt.LABEL_VALUE_MAX:
            return None
        key = (d.id, resource_version(wl))
        if key in self._unclaimed:
            return None
        found = await self._find_claimant(d, fresh=fresh)
        if found is None:  # (a claimant found is not kept: its copy goes stale with the write)
            self._unclaimed[key] = None
            while len(self._unclaimed) > 1024:
                self._unclaimed.popitem(last=False)
        return found

    async def _find_claimant(self, d: Decision, *, fresh: bool) -> tuple[jobkinds.JobKind, Ref, Json] | None:
        for kind in jobkinds.KINDS:
            if kind.key not in prebuilt.SUPPORTED:
                continue
            ref = Ref(kind.kind, kind.group, kind.version, kind.plural, "", d.namespace)
            watched = self.claimants[kind.kind]
            if watched.synced and not fresh:
                hit = watched.find(d.namespace, d.name)
                self.stats.cached_reads += not watched.absent  # (an absent kind would not be listed either)
                items = [hit] if hit is not None else []
            elif kind.kind in self._served:
                items = await self._list_claimants(kind, ref, d)
            else:  # one lookup at a time finds out whether the kind is served, not every workload in flight
                async with self._probing.setdefault(kind.kind, asyncio.Lock()):
                    items = await self._list_claimants(kind, ref, d)
            if items:
                obj = {"apiVersion": kind.api_version, "kind": kind.kind, **items[0]}
                return kind, replace(ref, name=str((obj.get("metadata") or {}).get("name"))), obj
        return None

    async def _list_claimants(self, kind: jobkinds.JobKind, ref: Ref, d: Decision) -> list[Json]:
        """The objects of ``kind`` naming ``d``'s Workload as their prebuilt one; none when the kind is
        not served (no CRD) or not granted (its kind is off): then it is not asked for a minute."""
        if time.monotonic() - self._not_served.get(kind.kind, -1e9) < 60:
            return []
        try:
            items = await self.kube.list_objects(ref, label_selector=f"{PREBUILT_WORKLOAD_LABEL}={d.name}")
        except KubeApiError as e:
            if e.not_found or e.status == 403:
                self._not_served[kind.kind] = time.monotonic()
                self._served.discard(kind.kind)
                return []
            raise
        self._served.add(kind.kind)
        return items

    async def _kind_apply(self, owner: tuple[jobkinds.JobKind, Ref, Json],
                          d: AdmitWorkload | AdmitChecked | EvictWorkload) -> bool:
        """Admit or evict a workload kind's object; False on a conflict (read again)."""
        kind, ref, obj = owner
        verdict = idempotency(obj, d)
        if verdict == "stale":
            self.stats.stale += 1
            return True
        if verdict == "applied":
            self.stats.already_applied += 1
            return True
        if isinstance(d, AdmitWorkload | AdmitChecked):  # (with a check's podSetUpdates per podSet)
            flavors = {psa.name: [await self._flavor(f) for f in sorted({f for _, f in psa.flavors})]
                       for psa in d.admission.pod_set_assignments}
            ops = kind_admit_ops(kind, obj, d, flavors)
        else:
            ops = kind_evict_ops(kind, obj, d)
        try:
            await self.kube.json_patch(ref, ops, not_found_retriable=True)
        except KubeApiError as e:
            if e.conflict:
                self.stats.conflicts += 1
                return False
            raise
        return True

    async def _pod_scheduling(self, d: AdmitWorkload | AdmitChecked
                              ) -> dict[str, tuple[dict[str, str], list[dict[str, Any]]]]:
        """Each podSet's flavors' node labels and tolerations (what a released pod gets)."""
        out: dict[str, tuple[dict[str, str], list[dict[str, Any]]]] = {}
        for psa in d.admission.pod_set_assignments:
            names = sorted({f for _, f in psa.flavors})
            out[psa.name] = merged_scheduling([await self._flavor(name) for name in names])
        return out

    async def _flavor(self, name: str) -> FlavorScheduling:
        now = time.monotonic()
        hit = self._flavors.get(name)
        if hit is not None and now - hit[0] < self.flavor_ttl_seconds:
            return hit[1]
        out = flavor_scheduling(await self.kube.get(flavor_ref(name)))  # 404 is not retriable: a bad admission
        self._flavors[name] = (now, out)
        return out

    def workload_created(self, wl: Json) -> None:
        """The job reconciler (in this process) created ``wl``: remembered, so a pending mark for it
        needs no read; a mark that waited for it (404) is due now."""
        meta = wl.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        if not namespace or not name:
            return
        self._remember_workload(workload_ref(namespace, name), wl)
        waiting = self._later.get(f"pending:{namespace}/{name}")
        if waiting is not None:
            waiting.due = 0.0

    def _remember_workload(self, ref: Ref, wl: Json) -> None:
        """Keep what a pending mark needs of the Workload as the API server just returned it."""
        meta = wl.get("metadata") or {}
        key = str(ref)
        self._seen[key] = {"metadata": {"resourceVersion": meta.get("resourceVersion"),
                                        "annotations": meta.get("annotations") or {}},
                           "status": wl.get("status") or {}}
        self._seen.move_to_end(key)
        while len(self._seen) > self.pending_cache_size:
            self._seen.popitem(last=False)

    async def _patch_workload(self, ref: Ref, body: Json, *, status: bool) -> Json | None:
        """The patched Workload (remembered); None on a conflict (forgotten: re-read and try again)."""
        try:
            out = await self.kube.patch(ref, body, status=status, not_found_retriable=True)
        except KubeApiError as e:
            self._seen.pop(str(ref), None)
            if e.conflict:
                self.stats.conflicts += 1
                return None
            raise
        self._remember_workload(ref, out)
        return out

    async def _write_status(self, ref: Ref, wl: Json, desired: Json) -> bool:
        """False on a conflict (re-read and try again)."""
        patch = status_patch(wl, desired)
        if patch is None:
            return True
        return await self._patch_workload(ref, patch, status=True) is not None

    async def _patch_job(self, ref: Ref, body: Json) -> Json | None:
        """The patched Job; None on a conflict."""
        try:
            return await self.kube.patch(ref, body, not_found_retriable=True)
        except KubeApiError as e:
            if e.conflict:
                self.stats.conflicts += 1
                return None
            raise

    async def _admit(self, d: AdmitWorkload | AdmitChecked) -> None:
        # With admission checks the Job starts only once they are all Ready (AdmitChecked); a
        # podSetUpdate that conflicts with the flavors means it fails to start (Kueue's FailedToStart).
        starts = (not d.admission_checks) if isinstance(d, AdmitWorkload) else not d.failed_to_start
        for attempt in range(self.max_conflicts):
            fresh = attempt > 0  # after a conflict: read, the watched copies were stale
            wl = await self._workload(d, fresh=fresh)
            owned = await self._job_of(wl, d, fresh=fresh) if starts else None
            kind_owner = None
            if owned is not None:
                ref, job = owned
                verdict = idempotency(job, d)
                if verdict == "stale":
                    self.stats.stale += 1
                    return
                if verdict == "apply":
                    flavors = [await self._flavor(n) for n in flavor_names(d)]
                    if await self._patch_job(ref, job_admit_patch(job, d, flavors)) is None:
                        continue
                    self._later.pop(f"restore:{d.namespace}/{d.name}", None)
                else:
                    self.stats.already_applied += 1
            elif starts and (kind_owner := await self._kind_owner(wl, d, fresh=fresh)) is not None:
                if not await self._kind_apply(kind_owner, d):
                    continue
            elif starts and is_pod_workload(wl):  # pods held by the scheduling gate (a pod, a group): release them
                await release_pods(self._api, d.namespace, wl, await self._pod_scheduling(d))
            if starts and (owned is not None or kind_owner is not None or is_pod_workload(wl)):
                # It went to what runs it: nothing for a job that claims the Workload later to take.
                self._admissions.pop(f"{d.namespace}/{d.name}", None)
            status = wl.get("status") or {}
            desired = admitted_status(status, d) if isinstance(d, AdmitWorkload) else checked_status(status, d)
            if await self._write_status(self._ref(d.namespace, d.name), wl, desired):
                return
        raise KubeApiError(f"admit Workload {d.namespace}/{d.name}: still conflicting after {self.max_conflicts} "
                           "re-reads", retriable=True, status=409)

    async def _evict(self, d: EvictWorkload) -> None:
        key = f"{d.namespace}/{d.name}"
        for attempt in range(self.max_conflicts):
            fresh = attempt > 0  # after a conflict: read, the watched copies were stale
            wl = await self._workload(d, fresh=fresh)
            owned, standalone = await self._job_of(wl, d, fresh=fresh), False
            if owned is not None:
                ref, job = owned
                verdict = idempotency(job, d)
                if verdict == "stale":
                    self.stats.stale += 1
                    return
                if verdict == "apply":
                    patched = await self._patch_job(ref, job_evict_patch(job, d))
                    if patched is None:
                        continue
                    job = patched
                else:
                    self.stats.already_applied += 1
                if ANN_ORIGINAL in annotations_of(job) and not await self._restore(ref, job):
                    self._later[f"restore:{key}"] = _Later(attempts=0, due=time.monotonic() + 1.0, job=ref)
            elif (kind_owner := await self._kind_owner(wl, d, fresh=fresh)) is not None:
                if not await self._kind_apply(kind_owner, d):
                    continue
            elif is_pod_workload(wl):  # Kueue's pod integration stops its pods by deleting them
                await stop_pods(self._api, d.namespace, wl)
            elif is_standalone(wl):  # its owner clears the reservation (services/actuator/standalone.py)
                marked = await self._mark_evicted(wl, d)
                if marked is None:
                    continue
                standalone, wl = True, marked
            status = wl.get("status") or {}
            desired = evicting_status(status, d) if standalone else evicted_status(status, d)
            if await self._write_status(self._ref(d.namespace, d.name), wl, desired):
                if isinstance(d, DeactivateWorkload) and (wl.get("spec") or {}).get("active") is not False:
                    # Kueue's deactivation: spec.active=false, which a user sets back to true to start over.
                    await self.kube.patch(self._ref(d.namespace, d.name), {"spec": {"active": False}},
                                          not_found_retriable=False)
                return
        raise KubeApiError(f"evict Workload {key}: still conflicting after {self.max_conflicts} re-reads",
                           retriable=True, status=409)

    async def _mark_evicted(self, wl: Json, d: EvictWorkload) -> Json | None:
        """A standalone Workload marked with the eviction's decision id; None on a conflict."""
        patch = evicted_mark_patch(wl, d)
        if patch is None:
            return wl
        return await self._patch_workload(self._ref(d.namespace, d.name), patch, status=False)

    async def _create_requests(self, d: AdmitWorkload) -> None:
        """The provisioning check's requests (Kueue's controller): each PodTemplate, then the
        ProvisioningRequest, each created once by name (a re-delivered decision finds them). Each
        PodTemplate gets its own podSet's flavors' scheduling (a JobSet has several podSets)."""
        wl = await self._workload(d)
        assigned = {psa.name: sorted({f for _, f in psa.flavors}) for psa in d.admission.pod_set_assignments}
        for plan in d.provisioning_requests or ():
            for ps in plan.pod_sets:
                flavors = [await self._flavor(n) for n in assigned.get(ps.pod_set, ())]
                labels = {k: v for f in flavors for k, v in f.node_labels}
                tolerations = [t for f in flavors for t in f.tolerations]
                body = checkplan.pod_template_body(d.namespace, ps.pod_template, wl, ps.pod_set, labels, tolerations)
                await self.kube.create(checkplan.pod_template_ref(d.namespace, ps.pod_template), body)
            created = await self.kube.create(checkplan.request_ref(d.namespace, plan.name),
                                             checkplan.request_body(d.namespace, plan, wl))
            self.stats.provisioning_requests += int(created)

    async def _delete_requests(self, d: EvictWorkload) -> None:
        """Kueue deletes an evicted workload's ProvisioningRequests (and so their PodTemplates)."""
        for plan in d.provisioning_requests or ():
            await self.kube.delete(checkplan.request_ref(d.namespace, plan.name))
            for ps in plan.pod_sets:
                await self.kube.delete(checkplan.pod_template_ref(d.namespace, ps.pod_template))

    async def _restore(self, ref: Ref, job: Json) -> bool:
        """Put the template's own scheduling back if the Job may change now; True when nothing is left to do."""
        if (job.get("spec") or {}).get("suspend") is not True or job_finished(job):
            # Admitted again meanwhile (that admission built the template from the original), or
            # finished (evicted late: it never runs again, and a started Job's template may not change).
            return True
        body = job_restore_patch(job)
        if body is None:
            return True
        if not may_restore(job):
            return False
        if await self._patch_job(ref, body) is None:
            return False
        self.stats.restores += 1
        return True

    async def _mark_pending(self, d: MarkPending) -> None:
        key = f"{d.namespace}/{d.name}"
        want = (d.condition_reason, d.message, str(d.reason))
        if self._pending_cache.get(key) == want:
            self.stats.pending_unchanged += 1
            return
        try:
            await self._write_pending(d)
        except ActuationError as e:
            self._defer_pending(d, 0, e)
            return
        self._remember_pending(key, want)

    def _defer_pending(self, d: MarkPending, attempts: int, e: ActuationError) -> None:
        key = f"{d.namespace}/{d.name}"
        if not e.retriable or attempts + 1 >= self.tuning.max_attempts:
            self.stats.pending_dropped += 1
            _log.warning("pending status not written", decision=d.id, workload=key, error=str(e), attempts=attempts + 1)
            return
        delay = self.tuning.backoff(attempts + 1)
        self._later[f"pending:{key}"] = _Later(attempts=attempts + 1, due=time.monotonic() + delay, decision=d)

    def _remember_pending(self, key: str, want: tuple[str, str, str]) -> None:
        self._pending_cache[key] = want
        self._pending_cache.move_to_end(key)
        while len(self._pending_cache) > self.pending_cache_size:
            self._pending_cache.popitem(last=False)

    async def _write_pending(self, d: MarkPending) -> None:
        """The condition (and the annotation when its reason changed), patched from the last copy of
        the Workload seen — read only when there is none, or when that copy is stale (409)."""
        ref = self._ref(d.namespace, d.name)
        for attempt in range(self.max_conflicts):
            # The watched copy, or the one written last; after a conflict, read.
            wl = None if attempt else (self._watched(ref) or self._seen.get(str(ref)))
            if wl is None or holds_quota(wl):  # (a copy holding quota is read again to be sure)
                wl = await self._workload(d, fresh=True)
            if holds_quota(wl) or is_finished(wl):
                # A redo of a pending mark from before the admission the Workload shows, or a mark
                # recovered for a workload that finished since (the scheduler never marks a workload
                # that holds quota or finished pending): the newer state stands.
                self.stats.stale += 1
                return
            if annotations_of(wl).get(PENDING_REASON_ANNOTATION) != d.reason:
                body = {"metadata": {"resourceVersion": resource_version(wl),
                                     "annotations": {PENDING_REASON_ANNOTATION: str(d.reason)}}}
                patched = await self._patch_workload(ref, body, status=False)
                if patched is None:
                    continue
                wl = patched
            desired = pending_status(wl.get("status") or {}, d)
            if status_patch(wl, desired) is None:
                self.stats.pending_unchanged += 1
                return
            if await self._write_status(ref, wl, desired):
                self.stats.pending_written += 1
                return
        raise KubeApiError(f"mark Workload {d.namespace}/{d.name} pending: still conflicting after "
                           f"{self.max_conflicts} re-reads", retriable=True, status=409)

    async def _do_later(self) -> list[_Later]:
        """The restores that are due; returns the pending retries that are due (popped, at most
        ``marks_per_step``: the rest wait for the next step)."""
        now = time.monotonic()
        due: list[_Later] = []
        for name in sorted(k for k, v in self._later.items() if v.due <= now):
            item = self._later[name]
            if item.decision is not None:
                if len(due) < self.marks_per_step:
                    due.append(self._later.pop(name))
            elif item.job is not None:
                del self._later[name]
                await self._retry_restore(name, item)
        return due

    async def _retry_pending(self, item: _Later) -> None:
        assert item.decision is not None
        try:
            await self._write_pending(item.decision)
        except ActuationError as e:
            self._defer_pending(item.decision, item.attempts, e)
        else:
            key = f"{item.decision.namespace}/{item.decision.name}"
            self._remember_pending(key, (item.decision.condition_reason, item.decision.message,
                                         str(item.decision.reason)))

    async def _retry_restore(self, name: str, item: _Later) -> None:
        assert item.job is not None
        try:
            done = await self._restore(item.job, await self.kube.get(item.job))
        except ActuationError as e:
            if isinstance(e, KubeApiError) and e.not_found:
                return  # the Job is gone
            done = not e.retriable
            if done:
                _log.warning("template not restored", job=str(item.job), error=str(e))
        if not done and item.attempts + 1 < 2 * self.tuning.max_attempts:
            delay = min(2.0 ** item.attempts, 30.0)
            self._later[name] = _Later(attempts=item.attempts + 1, due=time.monotonic() + delay, job=item.job)

    # --- queue status ---------------------------------------------------------------------------

    async def _flush_queues(self) -> None:
        """Write each changed ClusterQueue / LocalQueue status once, ``marks_at_once`` queues at a
        time (the ClusterQueues first: a LocalQueue's status reads its ClusterQueue's quotas); failures
        wait for the next step."""
        gate = asyncio.Semaphore(max(self.marks_at_once, 1))
        now = time.monotonic()
        every = (self.queue_status_seconds_throttled if self.kube.throttled(self.throttled_window)
                 else self.queue_status_seconds)

        def due(ref: Ref) -> bool:
            if now - self._queue_written.get(str(ref), -1e9) < every:
                return False
            self._queue_written[str(ref)] = now
            return True

        async def cluster_queue(name: str) -> None:
            if not due(cluster_queue_ref(name)):
                return
            async with gate:
                written = await self._write_t9k_queue(name) if self.t9k else None
                if written is None:  # not a T9k Queue: a ClusterQueue object
                    written = await self._write_queue(cluster_queue_ref(name),
                                                      functools.partial(self._cq_status, name))
            if written:
                self.counts.dirty_cluster_queues.discard(name)

        async def local_queue(key: str) -> None:
            namespace, _, lq = key.partition("/")
            if not due(local_queue_ref(namespace, lq)):
                return
            async with gate:
                written = await self._write_queue(local_queue_ref(namespace, lq),
                                                  functools.partial(self._lq_status, key))
            if written:
                self.counts.dirty_local_queues.discard(key)

        await asyncio.gather(*(cluster_queue(n) for n in sorted(self.counts.dirty_cluster_queues)))
        await asyncio.gather(*(local_queue(k) for k in sorted(self.counts.dirty_local_queues)))

    async def _write_t9k_queue(self, name: str) -> bool | None:
        """The Queue ``t9k-system/<name>``'s ``status.allocated``, kept from admitted usage: True when
        done, False to try next step, None when there is no such Queue (a Kueue ClusterQueue)."""
        ref = t9k_queue_ref(name)
        try:
            await self.kube.get(ref)  # is there such a Queue?
        except KubeApiError as e:
            if e.status == 404:
                return None
            if e.retriable:
                return False
            _log.warning("queue status not written", queue=str(ref), error=str(e))
            return True
        return await self._write_queue(ref, lambda _: self.counts.t9k_queue_status(name))

    def _cq_status(self, name: str, obj: Json) -> Json:
        self._quotas[name] = flavor_quotas(obj)
        return self.counts.cluster_queue_status(name, self._quotas[name])

    def _lq_status(self, key: str, obj: Json) -> Json:
        cq = str((obj.get("spec") or {}).get("clusterQueue") or "")
        return self.counts.local_queue_status(key, self._quotas.get(cq, ()))

    def _queue_copy(self, ref: Ref, now: float) -> Json | None:
        """The newest copy of a queue at hand: watched, or as our last write returned it (only we
        write its status); without watched copies, ours for ``flavor_ttl_seconds`` (its quotas may
        change)."""
        hit = self._queues.get(str(ref))
        watching = self.queues.get(ref.kind)
        if watching is None or not watching.synced:
            return hit[1] if hit is not None and now - hit[0] < self.flavor_ttl_seconds else None
        watched = watching.get(ref.namespace, ref.name)
        if hit is None or (watched is not None
                           and not resource_version_newer(resource_version(hit[1]), resource_version(watched))):
            return watched
        return hit[1]

    async def _write_queue(self, ref: Ref, desired: Callable[[Json], Json]) -> bool:
        """True when done (written, unchanged, or not there to write); False to try next step. The
        object is read only when no copy is at hand (:meth:`_queue_copy`)."""
        key, now = str(ref), time.monotonic()
        try:
            at_hand = self._queue_copy(ref, now)
            if at_hand is not None:
                obj = at_hand
                self.stats.cached_reads += 1
            else:
                obj = await self.kube.get(ref)
                self._queues[key] = (now, obj)
            patch = queue_status_patch(obj, desired(obj))
            if patch is not None:
                self._queues[key] = (now, await self.kube.patch(ref, patch, status=True))
                self.stats.queue_status_writes += 1
        except KubeApiError as e:
            self._queues.pop(key, None)
            if e.retriable:
                return False
            _log.warning("queue status not written", queue=str(ref), error=str(e))
        return True


def _prebuilt_name(obj: Json) -> str:
    """The Workload a job names as its prebuilt one (by label: what a claimant lookup finds)."""
    return str(((obj.get("metadata") or {}).get("labels") or {}).get(PREBUILT_WORKLOAD_LABEL) or "")
