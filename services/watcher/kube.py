"""The Kubernetes watcher: one cluster's API objects become cluster events.

For every watched kind it LISTs (in pages), then WATCHes from the list's
resourceVersion with bookmarks; each notification goes through the pure
translator (``services.watcher.translate``) and the memory of what was already
published, and what is news is appended to cluster-events. A watch that the
server ends (its timeout) is resumed from the last resourceVersion seen; a 410
Gone, a cut connection or any other error makes it relist, after a capped
exponential back-off. A relist publishes only what changed and the deletes of
objects that vanished meanwhile. The memory is rebuilt from the log at start,
so a restarted watcher neither repeats itself nor misses a delete that happened
while it was down.

The first LIST of every kind happens in order (configuration first, Jobs last),
so that the scheduler learns of the queues before the workloads that use them.

Objects the translator refuses are logged and sent to the dead-letter topic
with the reason (object, field, message — never the object itself, which may
hold secrets); the watcher carries on.

Everything kubernetes-asyncio and aiohttp raise is wrapped here, once, in
:class:`WatchError` (``retriable``: whether trying again soon may help). A
non-retriable error (401, 403, 400) is retried too, but at the longest back-off:
a watcher must outlive an RBAC rule being fixed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final

import aiohttp
import structlog
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from events import dra, jobkinds, t9k
from events.cluster import KUEUE_GROUP
from events.codec import MalformedRecord, UnknownEventType, decode_envelope, encode
from events.envelope import Topics, event_key
from events.jobkinds import trainjob
from services.runtime.clock import wall_clock_ms
from services.runtime.kubeclient import watch_lines
from services.runtime.log import Log, LogError
from services.watcher.translate import (
    ID_PREFIX,
    KUEUE_VERSION,
    NAMESPACED,
    SOURCE,
    Change,
    EventType,
    Published,
    Ref,
    Translation,
    translate,
)

_log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class WatchedKind:
    kind: str
    group: str  # "" for the core group
    version: str
    plural: str

    @property
    def path(self) -> str:
        """The cluster-wide collection (all namespaces for a namespaced kind)."""
        if not self.group:
            return f"/api/{self.version}/{self.plural}"
        return f"/apis/{self.group}/{self.version}/{self.plural}"

    @property
    def namespaced(self) -> bool:
        return self.kind in NAMESPACED


def _kueue(kind: str, plural: str) -> WatchedKind:
    return WatchedKind(kind, KUEUE_GROUP, KUEUE_VERSION, plural)


DEFAULT_KINDS: Final[tuple[WatchedKind, ...]] = (
    WatchedKind("Namespace", "", "v1", "namespaces"),
    WatchedKind("PriorityClass", "scheduling.k8s.io", "v1", "priorityclasses"),
    _kueue("ResourceFlavor", "resourceflavors"),
    _kueue("Cohort", "cohorts"),
    _kueue("ClusterQueue", "clusterqueues"),
    _kueue("LocalQueue", "localqueues"),
    _kueue("WorkloadPriorityClass", "workloadpriorityclasses"),
    _kueue("AdmissionCheck", "admissionchecks"),
    _kueue("ProvisioningRequestConfig", "provisioningrequestconfigs"),
    _kueue("MultiKueueConfig", "multikueueconfigs"),
    _kueue("MultiKueueCluster", "multikueueclusters"),
    _kueue("Workload", "workloads"),
    WatchedKind(dra.KIND, dra.GROUP, "v1", "resourceclaimtemplates"),  # before the Jobs that claim them
    WatchedKind("Job", "batch", "v1", "jobs"),
    WatchedKind("ProvisioningRequest", "autoscaling.x-k8s.io", "v1", "provisioningrequests"),
)
"""Configuration first: the initial LISTs run in this order."""

T9K_KINDS: Final[tuple[WatchedKind, ...]] = (WatchedKind("Queue", t9k.GROUP, "v1beta1", "queues"),)
"""T9k Scheduler's Queues (``events.t9k``), for clusters that run T9k: watched before the Jobs
when the watcher runs with ``--t9k`` (the Queue CRD must exist)."""


TRAINING_RUNTIMES: Final[tuple[WatchedKind, ...]] = tuple(
    WatchedKind(k, trainjob.GROUP, trainjob.VERSION, trainjob.RUNTIME_PLURALS[k]) for k in trainjob.RUNTIME_KINDS)
"""Kubeflow Trainer's runtimes, watched (before the TrainJobs that name them) when TrainJob is."""
JOB_KINDS: Final[tuple[WatchedKind, ...]] = tuple(
    w for k in jobkinds.OTHER_KINDS
    for w in (*(TRAINING_RUNTIMES if k is trainjob.TRAINJOB else ()),
              WatchedKind(k.kind, k.group, k.version, k.plural)))
"""The workload kinds besides Job (``events.jobkinds``), each watched only when asked for (its CRD
must exist): ``--job-kinds``; TrainJob's runtimes with it."""
JOB_KIND_NAMES: Final = frozenset({"Job", *(k.kind for k in jobkinds.OTHER_KINDS)})


def job_kind_watches(job_kinds: Sequence[str]) -> tuple[WatchedKind, ...]:
    """The watches for ``--job-kinds`` (a TrainJob's runtimes with TrainJob), in :data:`JOB_KINDS` order."""
    wanted = set(job_kinds) | (set(trainjob.RUNTIME_KINDS) if trainjob.TRAINJOB.kind in job_kinds else set())
    return tuple(k for k in JOB_KINDS if k.kind in wanted)


class WatchError(Exception):
    """Listing or watching failed; ``retriable`` says whether trying again soon may help."""

    def __init__(self, message: str, *, retriable: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.retriable = retriable
        self.status = status

    @property
    def gone(self) -> bool:
        """410 Gone: the resourceVersion is too old to watch from; only a relist helps."""
        return self.status == 410


@dataclass
class WatcherStats:
    WHOSE: ClassVar[str] = "the Kubernetes watcher's"
    published: int = 0  # envelopes appended to cluster-events
    skipped: int = 0  # translated envelopes not appended: already published
    notifications: int = 0  # watch notifications and listed objects translated
    relists: int = 0  # LISTs after the first one of a kind
    errors: int = 0  # API errors (each followed by a relist)
    refused: int = 0  # objects the translator refused (dead letters)
    recovered: int = 0  # envelopes of a previous run read back at start


def _http_error(what: str, status: int, message: str) -> WatchError:
    # 400: our request is wrong; 401/403: credentials or RBAC. Everything else (404: CRD not
    # installed yet, 410, 429, 5xx) may pass by itself.
    retriable = status not in (400, 401, 403)
    return WatchError(f"{what}: HTTP {status}: {message}", retriable=retriable, status=status)


class _KindWatcher:
    """LIST + WATCH of one kind, publishing through the shared memory."""

    def __init__(self, shell: _Shell, kind: WatchedKind) -> None:
        self.shell, self.kind = shell, kind

    async def _get(self, query: list[tuple[str, str]], timeout: aiohttp.ClientTimeout) -> aiohttp.ClientResponse:
        what = f"GET {self.kind.path}"
        try:
            resp: aiohttp.ClientResponse = await self.shell.api.call_api(
                self.kind.path, "GET", query_params=query, header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"], _preload_content=False, _request_timeout=timeout,
            )
        except ApiException as e:
            raise _http_error(what, int(e.status or 0), str(e.reason)) from e
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise WatchError(f"{what}: {type(e).__name__}: {e}", retriable=True) from e
        if resp.status != 200:
            try:
                text = await resp.text()
            except (aiohttp.ClientError, TimeoutError, OSError):
                text = ""
            finally:
                resp.release()
            raise _http_error(what, resp.status, _status_message(text))
        return resp

    async def relist(self) -> str:
        """LIST every object of the kind; publish what changed and the deletes of what vanished.
        Returns the list's resourceVersion, to watch from."""
        seen: set[tuple[str, str, str]] = set()
        token = ""
        rv = ""
        timeout = aiohttp.ClientTimeout(total=self.shell.request_timeout_s)
        while True:
            query = [("limit", str(self.shell.page_size))]
            if token:
                query.append(("continue", token))
            resp = await self._get(query, timeout)
            try:
                data = json.loads(await resp.read())
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as e:
                raise WatchError(f"LIST {self.kind.path}: {type(e).__name__}: {e}", retriable=True) from e
            finally:
                resp.release()
            meta = data.get("metadata") if isinstance(data, dict) else None
            items = data.get("items") if isinstance(data, dict) else None
            if not isinstance(meta, dict) or not isinstance(items, list):
                raise WatchError(f"LIST {self.kind.path}: not a list response", retriable=True)
            rv = str(meta.get("resourceVersion") or rv)
            for item in items:
                tr = self.shell.handle(self.kind.kind, "ADDED", item)
                seen.add(tr.source)
            token = str(meta.get("continue") or "")
            if not token:
                break
        for source in self.shell.memory.sources(self.kind.kind):
            if source not in seen:
                self.shell.publish(self.shell.memory.vanished(source, cluster=self.shell.cluster,
                                                              resource_version=rv, time_ms=self.shell.clock()))
        _log.info("watcher.listed", cluster=self.shell.cluster, kind=self.kind.kind, objects=len(seen),
                  resource_version=rv)
        return rv

    async def watch(self, rv: str) -> str:
        """WATCH from ``rv`` until the server ends the stream; returns the last resourceVersion seen."""
        seconds = self.shell.watch_timeout_s
        query = [("watch", "true"), ("resourceVersion", rv), ("allowWatchBookmarks", "true"),
                 ("timeoutSeconds", str(seconds))]
        # No total timeout (a watch is long); a stream silent for longer than the server's own
        # timeout plus a margin is a dead connection.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.shell.request_timeout_s,
                                        sock_read=seconds + 30)
        resp = await self._get(query, timeout)
        what = f"WATCH {self.kind.path}"
        try:
            async for line in watch_lines(resp):
                rv = self._notification(what, line, rv)
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise WatchError(f"{what}: {type(e).__name__}: {e}", retriable=True) from e
        finally:
            resp.release()
        return rv

    def _notification(self, what: str, line: bytes, rv: str) -> str:
        try:
            event = json.loads(line)
        except ValueError as e:
            raise WatchError(f"{what}: malformed watch event: {e}", retriable=True) from e
        kind = event.get("type") if isinstance(event, dict) else None
        obj = event.get("object") if isinstance(event, dict) else None
        if not isinstance(obj, dict):
            raise WatchError(f"{what}: malformed watch event: no object", retriable=True)
        if kind == "ERROR":
            raise _http_error(what, int(obj.get("code") or 0), str(obj.get("message") or obj.get("reason") or ""))
        meta = obj.get("metadata")
        new_rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self.shell.handle(self.kind.kind, kind, obj)
        elif kind != "BOOKMARK":
            _log.warning("watcher.unknown_event_type", cluster=self.shell.cluster, kind=self.kind.kind, type=kind)
        return str(new_rv) if new_rv else rv

    async def run(self, rv: str | None) -> None:
        """Watch (relisting when needed) until the watcher stops."""
        shell = self.shell
        delay = shell.backoff_initial_s
        while not shell.stop.is_set():
            try:
                if rv is None:
                    rv = await self.relist()
                    shell.stats.relists += 1
                rv = await self.watch(rv)
                delay = shell.backoff_initial_s
            except WatchError as e:
                shell.stats.errors += 1
                rv = None
                if e.gone:
                    _log.info("watcher.gone", cluster=shell.cluster, kind=self.kind.kind, error=str(e))
                    continue
                wait = delay if e.retriable else shell.backoff_max_s
                log = _log.warning if e.retriable else _log.error
                log("watcher.error", cluster=shell.cluster, kind=self.kind.kind, error=str(e),
                    retriable=e.retriable, retry_in_s=wait)
                await shell.sleep(wait)
                delay = min(delay * 2, shell.backoff_max_s)


def _status_message(text: str) -> str:
    """The message of a Kubernetes Status body, or the start of whatever came back."""
    with contextlib.suppress(ValueError):
        body = json.loads(text)
        if isinstance(body, dict) and body.get("message"):
            return str(body["message"])
    return text[:200]


class _Shell:
    """State shared by the kinds' loops: the log, the memory, the counters."""

    # Many arguments: keyword-only options with defaults.
    def __init__(self, log: Log, api: ApiClient, stop: asyncio.Event, *, cluster: str, topics: Topics,  # noqa: PLR0913
                 clock: Callable[[], int], stats: WatcherStats, backoff: tuple[float, float],
                 watch_timeout_s: int, request_timeout_s: float, page_size: int,
                 kinds: Sequence[WatchedKind] = ()) -> None:
        self.log, self.api, self.stop, self.cluster, self.topics = log, api, stop, cluster, topics
        self.clock, self.stats = clock, stats
        self.backoff_initial_s, self.backoff_max_s = backoff
        self.watch_timeout_s, self.request_timeout_s, self.page_size = watch_timeout_s, request_timeout_s, page_size
        self.owners = frozenset(k.kind for k in kinds if k.kind in JOB_KIND_NAMES)
        self.memory = Published(self.owners)
        self.claim_templates = ClaimTemplates()
        self.runtimes = TrainingRuntimes()

    async def sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds)

    def recover(self) -> None:
        """Rebuild the memory from this watcher's envelopes on cluster-events."""
        prefix = f"{ID_PREFIX}{self.cluster}:"
        needle = f'"{prefix}'.encode()
        topic = self.topics.cluster_events
        offset = 0
        while batch := self.log.read(topic, offset, 5000):
            for rec in batch:
                if needle not in rec.value:
                    continue  # cheap pre-filter: most records are not ours
                try:
                    env = decode_envelope(rec.value)
                except (MalformedRecord, UnknownEventType):
                    continue
                if env.source == SOURCE and env.cluster == self.cluster and env.id.startswith(prefix):
                    self.memory.remember(env)
                    self.stats.recovered += 1
            offset = batch[-1].offset + 1

    def handle(self, kind: str, event_type: EventType, obj: Any) -> Translation:
        """Translate one notification and publish what is news."""
        self.stats.notifications += 1
        now = self.clock()
        try:
            if kind == dra.KIND:
                self.claim_templates.note(event_type, obj)
            if kind in trainjob.RUNTIME_KINDS:
                for waiting in self.runtimes.note(kind, event_type, obj):
                    self.handle(trainjob.TRAINJOB.kind, "MODIFIED", waiting)
            if kind == trainjob.TRAINJOB.kind and isinstance(obj, dict):
                self.runtimes.remember(event_type, obj)
                obj = trainjob.embed(obj, self.runtimes.get)
            tr = translate(kind, event_type, obj, cluster=self.cluster, time_ms=now, owners=self.owners,
                           claim_templates=self.claim_templates.get)
        except Exception:  # a translator bug must not stop the watcher: the object is skipped, loudly
            _log.exception("watcher.translate_failed", cluster=self.cluster, kind=kind)
            self.stats.errors += 1
            return Translation(source=_source(kind, obj))
        if event_type == "DELETED":
            # What was published for the object is deleted, whatever the object looks like now.
            self.publish(self.memory.vanished(tr.source, cluster=self.cluster, resource_version=tr.resource_version,
                                              time_ms=now))
            return tr
        if tr.errors and self.memory.refuse(tr):
            self._refused(tr)
        self.publish(self.memory.select(tr))
        return tr

    def publish(self, change: Change) -> None:
        if change.envelopes:
            try:
                self.log.append(self.topics.cluster_events, [(event_key(e), encode(e)) for e in change.envelopes])
            except LogError as e:
                # The memory is left as it was: the relist this error causes publishes it again.
                raise WatchError(f"append to {self.topics.cluster_events}: {e}", retriable=e.retriable) from e
        self.memory.commit(change)
        self.stats.published += len(change.envelopes)
        self.stats.skipped += change.skipped

    def _refused(self, tr: Translation) -> None:
        self.stats.refused += len(tr.errors)
        for error in tr.errors:
            _log.warning("watcher.refused", cluster=self.cluster, object=str(tr.source),
                         resource_version=tr.resource_version, error=error)
        letters = [(f"{self.cluster}/{tr.source.namespace}/{tr.source.name}", encode({
            "source": SOURCE, "cluster": self.cluster, "kind": tr.source.kind, "namespace": tr.source.namespace,
            "name": tr.source.name, "resourceVersion": tr.resource_version, "reason": error,
        })) for error in tr.errors]
        try:
            self.log.append(self.topics.dead_letters, letters)
        except LogError as e:
            _log.error("watcher.dead_letter_failed", cluster=self.cluster, error=str(e))


class ClaimTemplates:
    """The ResourceClaimTemplates of the cluster as Kueue counts them (``events.dra``): what a
    Job's DRA claims are resolved against when the Job is published. An invalid template is
    forgotten (its translation reports why), so the claims naming it are not found."""

    def __init__(self) -> None:
        self.known: dict[tuple[str, str], dra.ClaimTemplate] = {}

    def note(self, event_type: EventType, obj: Any) -> None:
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if not isinstance(meta, dict):
            return
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        self.known.pop(key, None)
        if event_type == "DELETED":
            return
        version = str(obj.get("apiVersion") or f"{dra.GROUP}/v1").rpartition("/")[2]
        with contextlib.suppress(ValueError):
            self.known[key] = dra.read_template(_Refusal(), version, obj, *key)

    def get(self, namespace: str, name: str) -> dra.ClaimTemplate | None:
        return self.known.get((namespace, name))


class TrainingRuntimes:
    """Kubeflow Trainer's runtimes on the cluster (``events.jobkinds.trainjob``): what a TrainJob's
    podSets are read from when it is published. A TrainJob seen before its runtime (their watches
    are separate streams) is refused as naming a missing runtime, remembered, and translated again
    when that runtime arrives or changes."""

    def __init__(self) -> None:
        self.known: dict[tuple[str, str, str], Mapping[str, Any]] = {}
        self.trainjobs: dict[tuple[str, str], Any] = {}  # (namespace, name) -> the TrainJob as last seen

    def note(self, kind: str, event_type: EventType, obj: Any) -> list[Any]:
        """Take a runtime's notification; the TrainJobs that name it, to translate again."""
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if not isinstance(meta, dict):
            return []
        namespace = str(meta.get("namespace") or "") if kind == trainjob.NAMESPACED_RUNTIME else ""
        key = (kind, namespace, str(meta.get("name") or ""))
        self.known.pop(key, None)
        spec = obj.get("spec")
        if event_type == "DELETED" or not isinstance(spec, dict):
            return []
        self.known[key] = spec
        return [tj for tj in self.trainjobs.values() if trainjob.runtime_key(tj) == key]

    def remember(self, event_type: EventType, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            return
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        if event_type == "DELETED":
            self.trainjobs.pop(key, None)
        else:
            self.trainjobs[key] = obj

    def get(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.known.get((kind, namespace, name))


class _Refusal:
    def error(self, field: str, message: str) -> Exception:
        return ValueError(f"{field}: {message}")


def _source(kind: str, obj: Any) -> Ref:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    namespace = meta.get("namespace") if kind in NAMESPACED else ""
    return Ref(kind, str(namespace or ""), str(meta.get("name") or ""))


# Many arguments: keyword-only options with defaults.
async def run_kube_watcher(  # noqa: PLR0913
    log: Log,
    api: ApiClient,
    stop: asyncio.Event,
    *,
    cluster: str,
    topics: Topics | None = None,
    clock: Callable[[], int] = wall_clock_ms,
    kinds: Sequence[WatchedKind] = DEFAULT_KINDS,
    stats: WatcherStats | None = None,
    recover: bool = True,
    backoff: tuple[float, float] = (0.2, 30.0),
    watch_timeout_s: int = 300,
    request_timeout_s: float = 60.0,
    page_size: int = 500,
) -> WatcherStats:
    """Watch ``kinds`` of one cluster into cluster-events until ``stop`` is set.

    ``stats`` may be passed in to read the counters while it runs (metrics); the same object
    is returned. ``backoff`` is (first, longest) wait in seconds after an error."""
    shell = _Shell(log, api, stop, cluster=cluster, topics=topics or Topics(), clock=clock,
                   stats=stats if stats is not None else WatcherStats(), backoff=backoff,
                   watch_timeout_s=watch_timeout_s, request_timeout_s=request_timeout_s, page_size=page_size,
                   kinds=kinds)
    if recover:
        shell.recover()
        _log.info("watcher.recovered", cluster=cluster, objects=len(shell.memory), envelopes=shell.stats.recovered)
    watchers = [_KindWatcher(shell, k) for k in kinds]
    start: list[str | None] = []
    for w in watchers:  # in order: configuration before workloads
        if stop.is_set():
            break
        try:
            start.append(await w.relist())
        except WatchError as e:
            shell.stats.errors += 1
            _log.warning("watcher.error", cluster=cluster, kind=w.kind.kind, error=str(e), retriable=e.retriable)
            start.append(None)
    tasks = [asyncio.create_task(w.run(rv), name=f"watch {w.kind.kind}")
             for w, rv in zip(watchers, start, strict=False)]
    stopped = asyncio.create_task(stop.wait())
    try:
        done, _ = await asyncio.wait([*tasks, stopped], return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            if t is not stopped:
                t.result()  # a loop only ends on stop; anything else is a bug: raise it
    finally:
        for t in [*tasks, stopped]:
            t.cancel()
        await asyncio.gather(*tasks, stopped, return_exceptions=True)
    _log.info("watcher.stopped", cluster=cluster, published=shell.stats.published, relists=shell.stats.relists,
              errors=shell.stats.errors)
    return shell.stats
