"""Kubernetes API objects to cluster events: the watcher's pure core.

:func:`translate` turns one watch (or list) notification — a kind, ADDED /
MODIFIED / DELETED and the object as the API server serialises it (camelCase
JSON) — into envelopes, the way ``events.manifests`` turns a manifest into an
object: the same validation, the same normalised objects, the same Job ->
Workload rules (Kueue's workload name from the Job's name and uid). On top of
that it reads what only a live cluster says about a Job: it finished
(``WorkloadFinished``), all its pods are ready (``PodsReady``) or, after that, no
longer all (``PodsNotReady``), the pods of an
evicted Job are gone, or an evicted Workload nothing owns no longer holds its reservation
(``EvictionCompleted``). A Workload owned by a Job is
ignored: the Job is its source of truth. A Job the job reconciler rejected (label
``kueuelog.io/rejected=true``: created running, so it runs outside quota) is not queued:
it becomes the delete of its Workload, which the memory publishes only if the Job was
published as queued before it was rejected.

Envelope ids are deterministic (``watcher:<cluster>:<kind>:<namespace>/<name>:
<resourceVersion>:<what>``), so a notification delivered twice gives the same
envelopes. A bad object gives an error naming the object and the field, never
an exception.

The fold takes most repetitions in its stride, but not all of them (a
re-applied configuration object invalidates every parked workload; a repeated
``EvictionCompleted`` could complete a *later* eviction of the same workload).
:class:`Published` is the watcher's memory of what it has published per API
object, so that a relist or a re-delivered notification publishes only what
changed, and a relist can publish the deletes of objects that vanished. It is
pure too: the shell asks it what to publish and commits the answer only once
the log has taken it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal, NamedTuple

import msgspec

from events import dra, jobkinds, jobs, t9k
from events import objects as o
from events.cluster import (
    ACTUATION_ANNOTATIONS,
    EVICTED_ANNOTATION,
    KUEUE_GROUP,
    ORIGINAL_POD_SCHEDULING_ANNOTATION,
    REJECTED_LABEL,
    ConditionReason,
    ConditionStatus,
    ConditionType,
    JobConditionType,
)
from events.codec import encode
from events.envelope import Envelope
from events.jobkinds import trainjob
from events.kueue_versions import STORAGE_VERSION, respell
from events.manifests import Document, ManifestError, normalize
from events.messages import (
    ClusterEvent,
    EvictionCompleted,
    ObjectApplied,
    ObjectDeleted,
    PodsNotReady,
    PodsReady,
    ProvisioningRequestObserved,
    WorkloadActivation,
    WorkloadFinished,
)
from services.watcher import elastic, provisioning

SOURCE: Final = "watcher"
ID_PREFIX: Final = "watcher:"
KUEUE_VERSION: Final = STORAGE_VERSION
"""Kueue's kinds are listed and watched at the version our CRDs store (and current Kueue's): the
API server returns objects as stored, whatever version they were written at, so each body is
respelled for its version (:func:`events.kueue_versions.respell`) before it is parsed."""
_KUEUE_API_VERSION: Final = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
API_VERSIONS: Final[Mapping[str, str]] = {
    "ResourceFlavor": _KUEUE_API_VERSION,
    "Cohort": _KUEUE_API_VERSION,
    "ClusterQueue": _KUEUE_API_VERSION,
    "LocalQueue": _KUEUE_API_VERSION,
    "WorkloadPriorityClass": _KUEUE_API_VERSION,
    "AdmissionCheck": _KUEUE_API_VERSION,
    "ProvisioningRequestConfig": _KUEUE_API_VERSION,
    "MultiKueueConfig": _KUEUE_API_VERSION,
    "MultiKueueCluster": _KUEUE_API_VERSION,
    "Namespace": "v1",
    "PriorityClass": "scheduling.k8s.io/v1",
    "Workload": _KUEUE_API_VERSION,
    "Job": "batch/v1",
    "Queue": t9k.API_VERSION,
    "ProvisioningRequest": "autoscaling.x-k8s.io/v1",
    dra.KIND: f"{dra.GROUP}/v1",
    **{k.kind: k.api_version for k in jobkinds.OTHER_KINDS},
    **dict.fromkeys(trainjob.RUNTIME_KINDS, trainjob.API_VERSION),  # checked; their TrainJobs read them
}
"""The kinds the watcher translates, configuration first, with the apiVersion an object of the
kind is read as when it comes without one (items of a list response of built-in kinds do)."""

NAMESPACED: Final = frozenset({"LocalQueue", "Workload", "Job", "Queue", "ProvisioningRequest", dra.KIND,
                               *(k.kind for k in jobkinds.OTHER_KINDS), trainjob.NAMESPACED_RUNTIME})
OTHER_JOB_KINDS: Final[Mapping[str, jobkinds.JobKind]] = {k.kind: k for k in jobkinds.OTHER_KINDS}
"""The workload kinds besides Job (``events.jobkinds``), by kind."""

EventType = Literal["ADDED", "MODIFIED", "DELETED"]


class Ref(NamedTuple):
    """An object's identity: kind, namespace ("" when cluster-scoped), name."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"


@dataclass(frozen=True)
class Translation:
    """What one notification about ``source`` says.

    ``frozen``: the object is a Job whose spec is not the user's to change its Workload: it runs
    (not suspended, or pods still active) or carries the actuator's injected node selector and
    tolerations (not yet restored after an eviction). Kueue does not take a started Job's spec
    into its Workload (podSets are immutable while quota is reserved), and the actuator's own
    changes (injected scheduling, partial-admission parallelism) must not flow back into it."""

    source: Ref
    envelopes: list[Envelope] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    resource_version: str = ""
    frozen: bool = False
    elastic: bool = False  # a Job annotated kueue.x-k8s.io/elastic-job: a scale-down thaws it (elastic.py)


def ref_of(obj: o.AnyObject) -> Ref:
    tag = type(obj).__struct_config__.tag
    return Ref(str(tag), getattr(obj, "namespace", ""), getattr(obj, "name", ""))


JOB_ONLY: Final = frozenset({"Job"})


def source_of(obj: o.AnyObject, owners: frozenset[str] = JOB_ONLY) -> Ref:
    """The API object a published object was translated from: a Job for a Job's Workload (a JobSet
    for a JobSet's, ... for the workload kinds in ``owners``, those the watcher watches)."""
    if isinstance(obj, o.Workload) and obj.owner is not None and _is_job_owner(obj.owner.api_version,
                                                                              obj.owner.kind, owners):
        return Ref(obj.owner.kind, obj.namespace, obj.owner.name)
    return ref_of(obj)


def envelope_id(cluster: str, source: Ref, resource_version: str, what: str) -> str:
    return f"{ID_PREFIX}{cluster}:{source.kind}:{source.namespace}/{source.name}:{resource_version}:{what}"


def delete_envelope(cluster: str, source: Ref, target: Ref, resource_version: str, time_ms: int) -> Envelope:
    """The delete of ``target`` (what was published for ``source``)."""
    return Envelope(
        id=envelope_id(cluster, source, resource_version, "deleted"), source=SOURCE, cluster=cluster,
        event=ObjectDeleted(time=time_ms, kind=target.kind, name=target.name, namespace=target.namespace),
    )


def translate(kind: str, event_type: EventType, obj: Mapping[str, Any], *, cluster: str,
              time_ms: int, owners: frozenset[str] = JOB_ONLY, claim_templates: dra.Lookup = dra.NO_TEMPLATES,
              ) -> Translation:
    """One watch notification to envelopes (or errors naming the object and the field).

    ``owners``: the workload kinds watched; a Workload owned by one of them is left to its owner
    (one not watched, as a JobSet on a watcher without JobSets, is translated as a Workload).
    ``claim_templates``: the ResourceClaimTemplates known, for a workload's DRA claims (a
    template itself publishes nothing: it is read into the workloads that claim it)."""
    where = f"cluster:{cluster}"
    if not isinstance(obj, Mapping):
        return Translation(Ref(kind, "", ""), errors=[f"{where}: {kind}: expected an object, got "
                                                      f"{type(obj).__name__}"])
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(meta, Mapping) or not isinstance(name, str) or not name:
        return Translation(Ref(kind, "", ""), errors=[f"{where}: {kind}: metadata.name: required field is missing"])
    namespace = meta.get("namespace") if kind in NAMESPACED else ""
    source = Ref(kind, namespace if isinstance(namespace, str) else "", name)
    rv = meta.get("resourceVersion")
    rv = rv if isinstance(rv, str) else ""
    located = f"{where}: {source}"
    if kind not in API_VERSIONS:
        return Translation(source, errors=[f"{located}: kind: unsupported kind {kind!r}"], resource_version=rv)
    if obj.get("kind", kind) != kind:
        return Translation(source, errors=[f"{located}: kind: expected {kind!r}, got {obj.get('kind')!r}"],
                           resource_version=rv)
    if kind == "Workload" and _owned_by_job(meta, owners):
        # The Job (or its kind's object) is its source of truth, but for spec.active (a user re-activating it).
        return _activation(cluster, source, event_type, obj, rv, time_ms)
    if kind == "Job" and _rejected(meta):
        return _not_queued(cluster, source, meta, rv, time_ms)
    if kind == "ProvisioningRequest":
        return provisioning.translate_request(cluster, source, event_type, obj, meta, rv, time_ms)
    body = _as_manifest(kind, obj, meta)
    try:
        normalized = normalize(Document(where, 0, body))
    except ManifestError as e:
        return Translation(source, errors=[str(e)], resource_version=rv)
    if normalized is None:
        return Translation(source, resource_version=rv)  # a Job without the queue-name label: not Kueue's
    if isinstance(normalized, o.Workload):
        normalized = dra.resolve(normalized, claim_templates)

    def envelope(what: str, event: ClusterEvent, correlation_id: str = "") -> Envelope:
        return Envelope(id=envelope_id(cluster, source, rv, what), source=SOURCE, cluster=cluster, event=event,
                        correlation_id=correlation_id)

    if event_type == "DELETED":
        return Translation(source, [delete_envelope(cluster, source, ref_of(normalized), rv, time_ms)],
                           resource_version=rv)
    envelopes = [envelope("applied", ObjectApplied(time=time_ms, object=normalized))]
    frozen, errors = False, list[str]()
    if isinstance(normalized, o.Workload):
        status, frozen, errors = _workload_status(kind, located, obj, body, meta, normalized, time_ms)
        envelopes.extend(envelope(what, ev, corr) for what, ev, corr in status)
    return Translation(source, envelopes, errors, resource_version=rv, frozen=frozen,
                       elastic=kind == "Job" and elastic.is_elastic(meta))


def _workload_status(kind: str, located: str, obj: Mapping[str, Any], body: dict[str, Any],
                     meta: Mapping[str, Any], normalized: o.Workload, time_ms: int,
                     ) -> tuple[list[tuple[str, ClusterEvent, str]], bool, list[str]]:
    """The status events a workload's object carries (what, event, correlation id), whether the
    object is frozen (running, or carrying the pod scheduling the actuator injected), and errors."""
    annotations = meta.get("annotations")
    injected = isinstance(annotations, Mapping) and ORIGINAL_POD_SCHEDULING_ANNOTATION in annotations
    if kind in OTHER_JOB_KINDS:
        running, events = _kind_status(OTHER_JOB_KINDS[kind], body, meta, normalized, time_ms)
        return list(events), running or injected, []
    if kind == "Workload":
        finished = [(what, ev, "") for what, ev in _workload_finished(obj, normalized, time_ms)]
        return finished or _workload_eviction_completed(obj, meta, normalized, time_ms), False, []
    if kind == "Job":
        running, events, errors = _job_status(located, body, meta, normalized, time_ms)
        return list(events), running or injected, errors
    return [], False, []


def _as_manifest(kind: str, obj: Mapping[str, Any], meta: Mapping[str, Any]) -> dict[str, Any]:
    """The object as a manifest the parser takes: kind and apiVersion filled in, the actuator's
    bookkeeping annotations taken off a Job (not the user's Job, so not part of its Workload),
    and a Kueue object respelled for the version it was read at."""
    body = dict(obj)
    body.setdefault("kind", kind)
    body.setdefault("apiVersion", API_VERSIONS[kind])
    annotations = meta.get("annotations")
    if ((kind in ("Job", "Workload") or kind in OTHER_JOB_KINDS) and isinstance(annotations, Mapping)
            and not ACTUATION_ANNOTATIONS.isdisjoint(annotations)):
        body["metadata"] = {**meta, "annotations": {k: v for k, v in annotations.items()
                                                    if k not in ACTUATION_ANNOTATIONS}}
    if str(body.get("apiVersion", "")).startswith(f"{KUEUE_GROUP}/"):
        body = respell(body)
    if kind == "Queue":
        # status.allocated is what the scheduler itself keeps from admitted usage: a Queue's
        # status changing is no news (simulate is where a given allocation counts as usage).
        body.pop("status", None)
    return body


ACTIVATION_KIND: Final = "WorkloadActivation"  # the watcher memory's target for a Job's Workload's spec.active


def _activation(cluster: str, source: Ref, event_type: str, obj: Mapping[str, Any], rv: str,
                time_ms: int) -> Translation:
    """A Job's Workload: only its ``spec.active`` is news (the memory publishes a change of it)."""
    spec = obj.get("spec")
    active = spec.get("active") if isinstance(spec, Mapping) else None
    if event_type == "DELETED" or not isinstance(active, bool):
        return Translation(source, resource_version=rv)
    event = WorkloadActivation(time=time_ms, namespace=source.namespace, name=source.name, active=active)
    env = Envelope(id=envelope_id(cluster, source, rv, "activation"), source=SOURCE, cluster=cluster, event=event)
    return Translation(source, [env], resource_version=rv)


def _activation_entry(ev: WorkloadActivation) -> Entry:
    return Entry(target=Ref(ACTIVATION_KIND, ev.namespace, ev.name), body=b"active" if ev.active else b"inactive")


def _rejected(meta: Mapping[str, Any]) -> bool:
    labels = meta.get("labels")
    return isinstance(labels, Mapping) and labels.get(REJECTED_LABEL) == "true"


def _not_queued(cluster: str, source: Ref, meta: Mapping[str, Any], rv: str, time_ms: int) -> Translation:
    """A rejected Job: the delete of the Workload it would be (published only if it was)."""
    uid = meta.get("uid")
    if not isinstance(uid, str) or not uid:
        return Translation(source, resource_version=rv)
    target = Ref("Workload", source.namespace, jobs.workload_name_for_job(source.name, uid))
    return Translation(source, [delete_envelope(cluster, source, target, rv, time_ms)], resource_version=rv)


def _is_job_owner(api_version: str, kind: str, owners: frozenset[str]) -> bool:
    """A watched workload kind's object (a Job, a JobSet, a PyTorchJob, ...) owns its Workload."""
    return kind in owners and (api_version, kind) in jobkinds.BY_KEY


def _owned_by_job(meta: Mapping[str, Any], owners: frozenset[str]) -> bool:
    refs = meta.get("ownerReferences")
    if not isinstance(refs, list):
        return False
    return any(isinstance(r, Mapping) and _is_job_owner(str(r.get("apiVersion", "")), str(r.get("kind", "")), owners)
               for r in refs)


def _job_status(
    located: str, body: Mapping[str, Any], meta: Mapping[str, Any], wl: o.Workload, time_ms: int
) -> tuple[bool, list[tuple[str, ClusterEvent, str]], list[str]]:
    """(running, (what, event, correlation id) for what the Job's status says, errors).

    Kueue's job integration (``pkg/controller/jobs/job``): finished is a Complete or Failed
    condition with status True (its message is the Workload's); pods ready is
    ready + succeeded >= min(parallelism, completions) of the Job as it is now; a Job is
    active while ``status.active`` is not 0."""
    spec = body.get("spec") or {}
    status = body.get("status")
    if status is None:
        status = {}
    if not isinstance(status, Mapping):
        return False, [], [f"{located}: status: expected an object, got {type(status).__name__}"]
    counts: dict[str, int] = {}
    for key in ("active", "ready", "succeeded"):
        value = status.get(key)
        if value is None:
            value = 0
        if isinstance(value, bool) or not isinstance(value, int):
            return False, [], [f"{located}: status.{key}: expected an integer, got {value!r}"]
        counts[key] = value
    conditions = status.get("conditions") or []
    if not isinstance(conditions, list):
        return False, [], [f"{located}: status.conditions: expected a list, got {type(conditions).__name__}"]
    suspended = spec.get("suspend") is True
    running = not suspended or counts["active"] > 0
    for c in conditions:
        if (isinstance(c, Mapping) and c.get("type") in (JobConditionType.COMPLETE, JobConditionType.FAILED)
                and c.get("status") == ConditionStatus.TRUE):
            message = c.get("message")
            finished = WorkloadFinished(time=time_ms, namespace=wl.namespace, name=wl.name,
                                        succeeded=c.get("type") == JobConditionType.COMPLETE,
                                        message=message if isinstance(message, str) else "")
            return running, [("finished", finished, "")], []
    pods = wl.pod_sets[0].count if wl.pod_sets else 0
    if not suspended and counts["ready"] + counts["succeeded"] >= pods:
        return running, [("pods-ready", PodsReady(time=time_ms, namespace=wl.namespace, name=wl.name), "")], []
    if not suspended and counts["active"] > 0:
        # Not all ready: news only after a readiness was published (a lost pod, waitForPodsReady's
        # recovery); while it is starting, the memory (``Published``) keeps it quiet.
        return running, [("pods-not-ready", PodsNotReady(time=time_ms, namespace=wl.namespace, name=wl.name), "")], []
    annotations = meta.get("annotations")
    decision = annotations.get(EVICTED_ANNOTATION) if isinstance(annotations, Mapping) else None
    if suspended and decision and counts["active"] == 0:
        completed = EvictionCompleted(time=time_ms, namespace=wl.namespace, name=wl.name)
        return running, [("eviction-completed", completed, str(decision))], []
    return running, [], []


def _workload_finished(obj: Mapping[str, Any], wl: o.Workload, time_ms: int) -> list[tuple[str, ClusterEvent]]:
    """A Workload no watched object owns, marked ``Finished=True`` on the cluster (the pod
    integration's pods and groups: ``services.actuator.podgroups``): it finished."""
    status = obj.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for c in conditions if isinstance(conditions, list) else []:
        if (isinstance(c, Mapping) and c.get("type") == ConditionType.FINISHED
                and c.get("status") == ConditionStatus.TRUE):
            message = c.get("message")
            return [("finished", WorkloadFinished(time=time_ms, namespace=wl.namespace, name=wl.name,
                                                  succeeded=c.get("reason") != ConditionReason.FAILED,
                                                  message=message if isinstance(message, str) else ""))]
    return []


def _workload_eviction_completed(obj: Mapping[str, Any], meta: Mapping[str, Any], wl: o.Workload, time_ms: int,
                                 ) -> list[tuple[str, ClusterEvent, str]]:
    """A Workload nothing owns that the actuator evicted (annotation ``kueuelog.io/evicted``: the
    eviction's decision id) has completed its eviction once its quota reservation is cleared on
    the cluster (``QuotaReserved`` not True, or no ``status.admission``): what runs it says so,
    as Kueue's performance runner does. Correlated with the decision id, so the memory publishes
    it once per eviction; a later re-admission reserves again and the next eviction has its own id."""
    annotations = meta.get("annotations")
    decision = annotations.get(EVICTED_ANNOTATION) if isinstance(annotations, Mapping) else None
    if not decision or not isinstance(decision, str) or meta.get("ownerReferences"):
        return []
    status = obj.get("status")
    status = status if isinstance(status, Mapping) else {}
    conditions = status.get("conditions")
    reserved = any(isinstance(c, Mapping) and c.get("type") == ConditionType.QUOTA_RESERVED
                   and c.get("status") == ConditionStatus.TRUE
                   for c in (conditions if isinstance(conditions, list) else []))
    if reserved and status.get("admission"):
        return []
    completed = EvictionCompleted(time=time_ms, namespace=wl.namespace, name=wl.name)
    return [("eviction-completed", completed, decision)]


def _kind_status(
    kind: jobkinds.JobKind, body: Mapping[str, Any], meta: Mapping[str, Any], wl: o.Workload, time_ms: int
) -> tuple[bool, list[tuple[str, ClusterEvent, str]]]:
    """(running, status events) of a workload kind besides Job: finished as its integration reads
    it (``JobKind.finished``); running while not held, its pods ready or not as the integration
    reads it (``JobKind.pods_ready``); an evicted object held again has completed its eviction (its
    controller removes the pods of a suspended object)."""
    suspended = kind.suspended(body)
    ended = kind.finished(body)
    if ended is not None:
        finished = WorkloadFinished(time=time_ms, namespace=wl.namespace, name=wl.name, succeeded=ended.succeeded,
                                    message=ended.message)
        return not suspended, [("finished", finished, "")]
    if not suspended:
        # Readiness as the kind's integration reads it (waitForPodsReady); not ready is news only
        # after a readiness was published (the memory keeps a starting object quiet).
        if kind.pods_ready(body):
            return True, [("pods-ready", PodsReady(time=time_ms, namespace=wl.namespace, name=wl.name), "")]
        return True, [("pods-not-ready", PodsNotReady(time=time_ms, namespace=wl.namespace, name=wl.name), "")]
    annotations = meta.get("annotations")
    decision = annotations.get(EVICTED_ANNOTATION) if isinstance(annotations, Mapping) else None
    if decision:
        completed = EvictionCompleted(time=time_ms, namespace=wl.namespace, name=wl.name)
        return False, [("eviction-completed", completed, str(decision))]
    return False, []


# --- what has been published -----------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """What was last published for one API object."""

    target: Ref  # the published object (a Job's Workload)
    body: bytes  # its encoding, to recognise an unchanged object
    finished: bool = False
    ready: bool = False
    evicted: str = ""  # the decision id of the last eviction whose completion was published


@dataclass(frozen=True)
class Change:
    """What to publish for one notification, and the memory once it is published."""

    source: Ref
    before: Entry | None
    after: Entry | None
    envelopes: list[Envelope]
    skipped: int = 0  # envelopes not published: already said



def _status_news(entry: Entry, env: Envelope) -> Entry | None:
    """The entry after a status event that is news (a first finish, a readiness, an eviction not
    seen yet), or None when the memory has it already."""
    ev = env.event
    if isinstance(ev, WorkloadFinished) and not entry.finished:
        return replace(entry, finished=True)
    if isinstance(ev, PodsReady) and not entry.ready:
        return replace(entry, ready=True)
    if isinstance(ev, PodsNotReady) and entry.ready:
        return replace(entry, ready=False)
    if isinstance(ev, EvictionCompleted) and entry.evicted != env.correlation_id:
        return replace(entry, evicted=env.correlation_id, ready=False)
    return None

def _applied(tr: Translation, env: Envelope, ev: ObjectApplied, after: Entry | None, out: list[Envelope]) -> Entry:
    """What is published of an object applied (appended to ``out``), and the memory after it."""
    target, body = ref_of(ev.object), encode(ev.object)
    if after is not None and after.target != target:
        # Another object under the same name (a Job recreated with a new uid while
        # its delete was missed): the old one is gone.
        out.append(delete_envelope(env.cluster, tr.source, after.target, tr.resource_version, ev.time))
        after = None
    if after is None:
        out.append(env)
        return Entry(target=target, body=body)
    if after.body != body and isinstance(ev.object, o.LocalQueue) and _fair_sharing_news_only(after.body, ev.object):
        return after  # the admission fair sharing status the actuator writes: the scheduler's own news
    if after.body != body and not tr.frozen:
        out.append(env)
        return replace(after, body=body)
    if after.body != body and tr.elastic and isinstance(ev.object, o.Workload):
        rescaled = elastic.rescaled_workload(after.body, ev.object)
        if rescaled is not None:
            out.append(msgspec.structs.replace(env, event=msgspec.structs.replace(ev, object=rescaled)))
            return replace(after, body=encode(rescaled))
    return after


def _fair_sharing_news_only(published: bytes, now: o.LocalQueue) -> bool:
    """Whether the LocalQueue changed only in ``status.fairSharing.admissionFairSharingStatus``: the
    scheduler seeds a LocalQueue's ledger from it once (services/core/admissionfair.py), and after
    that it is what the actuator writes from the scheduler's own decisions."""
    try:
        before = msgspec.json.decode(published, type=o.LocalQueue)
    except msgspec.DecodeError:
        return False
    return msgspec.structs.replace(before, afs_consumed=now.afs_consumed) == now


class Published:
    """The watcher's memory: per API object, what it has published (see the module docstring).

    ``select`` and ``vanished`` decide; ``commit`` applies their answer once the log has taken
    the envelopes, so a failed append leaves the memory as it was and a relist repeats it."""

    def __init__(self, owners: frozenset[str] = JOB_ONLY) -> None:
        self.owners = owners  # the workload kinds watched (see :func:`translate`)
        self.entries: dict[Ref, Entry] = {}
        self._sources: dict[Ref, Ref] = {}  # published target -> its source
        self._refused: dict[Ref, str] = {}  # source -> resourceVersion whose refusal was reported

    def __len__(self) -> int:
        return len(self.entries)

    def sources(self, kind: str) -> list[Ref]:
        return sorted(s for s in self.entries if s.kind == kind)

    def select(self, tr: Translation) -> Change:
        before = self.entries.get(tr.source)
        after = before
        out: list[Envelope] = []
        applied = False
        for env in tr.envelopes:
            ev = env.event
            if isinstance(ev, ObjectDeleted):
                if after is not None:
                    out.append(env if ref_of_deleted(ev) == after.target else
                               delete_envelope(env.cluster, tr.source, after.target, tr.resource_version, ev.time))
                after = None
                continue
            if isinstance(ev, ObjectApplied):
                applied = True
                after = _applied(tr, env, ev, after, out)
                continue
            if isinstance(ev, WorkloadActivation):
                # First seen active: nothing to say; afterwards each change of spec.active.
                said = _activation_entry(ev)
                if (after is None and not ev.active) or (after is not None and after.body != said.body):
                    out.append(env)
                after = said
                continue
            if isinstance(ev, ProvisioningRequestObserved):
                body = provisioning.observed_body(ev)
                if after is None or after.body != body:
                    after = Entry(target=tr.source, body=body)
                    out.append(env)
                continue
            if after is None:
                continue  # about an object never published
            news = _status_news(after, env)
            if news is not None:
                after = news
                out.append(env)
        if applied and after is not None and after.ready and not any(isinstance(e.event, PodsReady)
                                                                     for e in tr.envelopes):
            after = replace(after, ready=False)  # no longer ready: the next readiness is news
        return Change(tr.source, before, after, out, skipped=len(tr.envelopes) - len(out))

    def vanished(self, source: Ref, *, cluster: str, resource_version: str, time_ms: int) -> Change:
        """``source`` is gone (a relist no longer has it)."""
        before = self.entries.get(source)
        if before is None or source.kind == "ProvisioningRequest" or before.target.kind == ACTIVATION_KIND:
            return Change(source, before, None, [])  # a request's delete says nothing to the scheduler
        return Change(source, before, None, [delete_envelope(cluster, source, before.target, resource_version,
                                                             time_ms)])

    def commit(self, change: Change) -> None:
        before, after = change.before, change.after
        if before is not None and (after is None or after.target != before.target):
            self._sources.pop(before.target, None)
        if after is None:
            self.entries.pop(change.source, None)
            self._refused.pop(change.source, None)
            return
        self.entries[change.source] = after
        self._sources[after.target] = change.source
        self._refused.pop(change.source, None)

    def refuse(self, tr: Translation) -> bool:
        """Whether ``tr``'s errors are news (not reported for this resourceVersion before); remembers them."""
        if self._refused.get(tr.source) == tr.resource_version:
            return False
        self._refused[tr.source] = tr.resource_version
        return True

    def remember(self, env: Envelope) -> None:
        """Rebuild the memory from what this watcher published before (its envelopes in the log)."""
        ev = env.event
        if isinstance(ev, ProvisioningRequestObserved):
            source = Ref("ProvisioningRequest", ev.namespace, ev.name)
            self.commit(Change(source, self.entries.get(source),
                               Entry(target=source, body=provisioning.observed_body(ev)), []))
            return
        if isinstance(ev, ObjectApplied):
            source, target = source_of(ev.object, self.owners), ref_of(ev.object)
            before = self.entries.get(source)
            keep = before if before is not None and before.target == target else None
            after = replace(keep, body=encode(ev.object)) if keep else Entry(target=target, body=encode(ev.object))
            self.commit(Change(source, before, after, []))
            return
        if isinstance(ev, ObjectDeleted):
            found = self._sources.get(ref_of_deleted(ev))
            if found is not None:
                self.commit(Change(found, self.entries.get(found), None, []))
            return
        if isinstance(ev, WorkloadActivation):
            source = Ref("Workload", ev.namespace, ev.name)
            self.commit(Change(source, self.entries.get(source), _activation_entry(ev), []))
            return
        if not isinstance(ev, WorkloadFinished | PodsReady | PodsNotReady | EvictionCompleted):
            return
        found = self._sources.get(Ref("Workload", ev.namespace, ev.name))
        entry = self.entries.get(found) if found is not None else None
        if found is None or entry is None:
            return
        source = found
        if isinstance(ev, WorkloadFinished):
            entry = replace(entry, finished=True)
        elif isinstance(ev, PodsReady):
            entry = replace(entry, ready=True)
        elif isinstance(ev, PodsNotReady):
            entry = replace(entry, ready=False)
        else:
            entry = replace(entry, evicted=env.correlation_id, ready=False)
        self.commit(Change(source, self.entries[source], entry, []))


def ref_of_deleted(ev: ObjectDeleted) -> Ref:
    return Ref(ev.kind, ev.namespace, ev.name)
