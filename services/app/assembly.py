"""Where the services are put together: typed settings, and one function that runs a service.

``kueuelog run SERVICE`` reads its flags and ``KUEUELOG_*`` variables once, here,
into one settings object per service (:class:`SchedulerSettings`,
:class:`ActuatorSettings`, :class:`WatcherSettings`, :class:`SimclusterSettings`,
:class:`AllSettings`, each with the shared :class:`LogSettings` and
:class:`HttpSettings`); a bad value is a :class:`SettingsError` whose message
names the flag or variable. :func:`run` builds the service those settings
describe and runs it until SIGINT or SIGTERM: it opens the log (its backend
brings its own leadership and waiting, see :mod:`services.runtime.log`), serves
/healthz, /readyz and /metrics, takes the service's role through the log's one
leadership mechanism, and runs the service. The other subcommands open their log
through :func:`log_settings` and :func:`open_log` too.

Precedence is the same everywhere: a flag, else its ``KUEUELOG_*`` variable,
else the default.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import signal
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal, assert_never

from events.envelope import Topics
from events.simautoscaler import Behaviour, BehaviourError, parse_all
from services.app.exits import ConfigurationError, UsageError
from services.runtime.clock import ClockMode
from services.runtime.log import Log, LogError, Refused
from services.runtime.supervise import ServiceStatus, lead, release

if TYPE_CHECKING:
    from kubernetes_asyncio import client
    from prometheus_client import CollectorRegistry

    from events.shardmap import ShardMap
    from services.actuator.job_reconciler import Policy
    from services.runtime.health import HealthServer
    from services.scheduler.runner import StepHook
    from services.simcluster.arrivals import ArrivalStream

ServiceName = Literal["watcher", "scheduler", "actuator", "simcluster", "all"]
DEFAULT_HTTP_PORT = 8080
_POLICIES: tuple[Policy, ...] = ("suspend", "reject")
_TRUE, _FALSE = ("1", "true", "yes"), ("", "0", "false", "no")


class SettingsError(UsageError):
    """Flags that do not go together: the command prints ``error: <message>`` and exits 2."""


class BadSetting(SettingsError, ConfigurationError):
    """A setting that cannot work (from the environment, a kubeconfig, a port): exit 3."""


# --- the log ---------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class LogSettings:
    """Where the log is: an embedded log directory, or Kafka (its other settings come from
    ``KUEUELOG_KAFKA_*``: see :class:`~services.runtime.kafka.KafkaSettings`)."""

    path: str | None = None
    bootstrap_servers: str | None = None
    topic_prefix: str = "kueuelog"
    shard: int = 0
    create: bool = False  # the embedded log is created if missing

    @property
    def topics(self) -> Topics:
        return Topics(prefix=self.topic_prefix)


def log_settings(args: argparse.Namespace, *, path: str | None = None, create: bool = False,
                 environ: Mapping[str, str] = os.environ) -> LogSettings:
    """``path`` (a positional LOG) or --log, else --bootstrap-servers or KUEUELOG_KAFKA_BOOTSTRAP_SERVERS
    (the variable only when no embedded log is given)."""
    where: str | None = path or getattr(args, "log", None)
    bootstrap: str | None = args.bootstrap_servers or (None if where else
                                                       environ.get("KUEUELOG_KAFKA_BOOTSTRAP_SERVERS"))
    if where and bootstrap:
        raise SettingsError("give either an embedded log (--log/LOG) or --bootstrap-servers, not both")
    if not where and not bootstrap:
        raise SettingsError("no log given: use --log PATH (the embedded log) or --bootstrap-servers")
    if int(args.shard) < 0:
        raise SettingsError("--shard all is for replay, explain and tail; a service runs one shard (--shard N)")
    return LogSettings(path=where, bootstrap_servers=bootstrap, topic_prefix=str(args.topic_prefix),
                       shard=int(args.shard), create=create)


def open_log(settings: LogSettings, *, role: str | None = None, environ: Mapping[str, str] = os.environ,
             shards: int | None = None) -> Log:
    """The embedded log (its shard ``settings.shard``: ``services.runtime.shards``), or Kafka as
    the writer ``role`` (None: no transactional writer); ``shards`` overrides
    KUEUELOG_KAFKA_SHARDS (a reader that learnt it from the recorded shard map). A log that
    cannot be opened raises the backend's LogError (exit 4), bad Kafka settings BadSetting."""
    if settings.bootstrap_servers:
        from services.runtime.kafka import KafkaLog, KafkaSettings

        try:
            kafka = KafkaSettings.from_env(environ, bootstrap_servers=settings.bootstrap_servers,
                                           **({"shards": shards} if shards else {}))
        except ValueError as e:
            raise BadSetting(str(e)) from None
        if settings.shard >= kafka.shards:
            raise BadSetting(f"kafka: shard {settings.shard} is outside 0..{kafka.shards - 1}: set "
                             f"KUEUELOG_KAFKA_SHARDS to the number of shards (the topics' partitions)")
        return KafkaLog(kafka, prefix=settings.topic_prefix, shard=settings.shard, role=role)
    from services.runtime.shards import ShardView
    from services.runtime.sqlite import SqliteLog

    assert settings.path is not None  # log_settings gives one or the other
    log = SqliteLog(settings.path, create=settings.create)
    return ShardView(log, settings.shard, owns=True) if settings.shard else log


# --- what each service is given --------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class HttpSettings:
    """/healthz, /readyz and /metrics; port 0 is off. ``explicit``: the port was asked for (then
    one that cannot be served is an error, not a warning)."""

    host: str = "0.0.0.0"
    port: int = DEFAULT_HTTP_PORT
    explicit: bool = False


@dataclass(frozen=True, kw_only=True)
class KubeSettings:
    """A kubeconfig (None: the pod's in-cluster configuration) and its context."""

    kubeconfig: str | None = None
    context: str | None = None


@dataclass(frozen=True, kw_only=True)
class ServiceSettings:
    """What every service has. ``writer`` is the role the log writes as (Kafka's transactional id),
    ``leads`` the role whose single writer it must be; None for both: any number of replicas."""

    log: LogSettings
    http: HttpSettings = field(default_factory=HttpSettings)
    cluster: str = "sim"

    name: ClassVar[ServiceName]
    writer: ClassVar[str | None]
    leads: ClassVar[str | None]


@dataclass(frozen=True, kw_only=True)
class SchedulerSettings(ServiceSettings):
    """With ``seed``, manifests appended to cluster-events once at start (Kueue's Configuration,
    which no watcher reads from a cluster); content already seeded is not appended again."""

    seed: tuple[str, ...] = ()
    name: ClassVar[ServiceName] = "scheduler"
    writer: ClassVar[str | None] = "scheduler"
    leads: ClassVar[str | None] = "scheduler"


@dataclass(frozen=True, kw_only=True)
class WatcherSettings(ServiceSettings):
    """Publishes without an election: replicas append idempotent envelopes."""

    kube: KubeSettings
    t9k: bool = False  # also watch T9k Queues (events.t9k)
    job_kinds: tuple[str, ...] = ()  # also watch these workload kinds (events.jobkinds), e.g. JobSet
    shard_map: ShardMap | None = None  # publish to every shard, each event where it belongs
    heartbeat_s: float = 0  # a tick under this cluster's name while its API server answers (MultiKueue workers)
    name: ClassVar[ServiceName] = "watcher"
    writer: ClassVar[str | None] = None
    leads: ClassVar[str | None] = None


@dataclass(frozen=True, kw_only=True)
class ActuatorSettings(ServiceSettings):
    """``kube`` None: it actuates the simulated cluster."""

    kube: KubeSettings | None = None
    policy: Policy = "suspend"
    qps: float = 20
    burst: int = 40
    elastic_quota_tree: bool = False  # keep the Kueue objects of ACK's ElasticQuotaTree (tree_reconciler)
    t9k: bool = False  # the job reconciler also takes Jobs on T9k Queues (events.t9k)
    job_kinds: tuple[str, ...] = ()  # also reconcile and actuate these workload kinds (events.jobkinds)
    name: ClassVar[ServiceName] = "actuator"
    writer: ClassVar[str | None] = "actuator"
    leads: ClassVar[str | None] = "actuator"


@dataclass(frozen=True, kw_only=True)
class SimclusterSettings(ServiceSettings):
    """With ``seed``, it also submits those manifests as they arrive."""

    clock: ClockMode = "real"
    seed: tuple[str, ...] = ()
    compress: int = 1
    provisioning: tuple[tuple[str, Behaviour], ...] = ()  # the simulated autoscaler (--provisioning)
    shard_map: ShardMap | None = None  # the seeded manifests go to every shard, each where it belongs
    name: ClassVar[ServiceName] = "simcluster"
    writer: ClassVar[str | None] = "simcluster"
    leads: ClassVar[str | None] = "simcluster"


@dataclass(frozen=True, kw_only=True)
class AllSettings(SimclusterSettings):
    """Scheduler, actuator and simulated cluster in one process, all writing as the scheduler's
    leader. ``until_done`` None: stop once nothing is left in simulated time only."""

    until_done: bool | None = None
    name: ClassVar[ServiceName] = "all"
    writer: ClassVar[str | None] = "all"
    leads: ClassVar[str | None] = "scheduler"


RunSettings = SchedulerSettings | WatcherSettings | ActuatorSettings | SimclusterSettings | AllSettings


# --- from flags and environment --------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """``run``'s flags and variables that more than one service reads, resolved and checked."""

    service: ServiceName
    kube: bool
    kubeconfig: str | None
    context: str | None
    cluster: str
    policy: Policy
    http: HttpSettings


def http_settings(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> HttpSettings:
    """--http-port, else KUEUELOG_HTTP_PORT, else 8080; 0 is off."""
    explicit = args.http_port is not None or bool(environ.get("KUEUELOG_HTTP_PORT"))
    raw = args.http_port if args.http_port is not None else environ.get("KUEUELOG_HTTP_PORT") or DEFAULT_HTTP_PORT
    try:
        port = int(raw)
    except ValueError:
        raise BadSetting(f"KUEUELOG_HTTP_PORT: expected a port number, got {raw!r}") from None
    if not 0 <= port <= 65535:
        raise SettingsError(f"--http-port: {port} is not a port number (0 turns the HTTP endpoints off)")
    return HttpSettings(host=str(args.http_host), port=port, explicit=explicit)


def _kube_wanted(service: ServiceName, flag: bool | None, environ: Mapping[str, str]) -> bool:
    if service == "watcher":
        return True
    if service != "actuator":
        if flag:
            raise SettingsError(f"--kube: 'run {service}' does not talk to Kubernetes (only watcher and actuator do)")
        return False
    if flag is not None:
        return flag
    raw = environ.get("KUEUELOG_KUBE", "").strip().lower()
    if raw not in _TRUE + _FALSE:
        raise BadSetting(f"KUEUELOG_KUBE: expected true or false, got {raw!r}")
    return raw in _TRUE


def _policy(raw: str) -> Policy:
    for policy in _POLICIES:
        if raw == policy:
            return policy
    raise BadSetting(f"KUEUELOG_JOB_POLICY: expected suspend or reject, got {raw!r}")


def run_options(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> RunOptions:
    service: ServiceName = args.service
    kube = _kube_wanted(service, args.kube, environ)
    kubeconfig = args.kubeconfig or environ.get("KUEUELOG_KUBECONFIG") or environ.get("KUBECONFIG") or None
    cluster = args.cluster or environ.get("KUEUELOG_CLUSTER") or ("default" if kube else "sim")
    policy = _policy(args.job_policy or environ.get("KUEUELOG_JOB_POLICY") or "suspend")
    if args.seed and service not in ("all", "simcluster", "scheduler"):
        raise SettingsError(f"--seed: 'run {service}' submits no manifests (only all, simcluster and scheduler do)")
    return RunOptions(service=service, kube=kube, kubeconfig=kubeconfig, context=args.context, cluster=cluster,
                      policy=policy, http=http_settings(args, environ))


def _elastic_quota_tree(args: argparse.Namespace, environ: Mapping[str, str], *, kube: bool) -> bool:
    flag = getattr(args, "elastic_quota_tree", None)
    raw = environ.get("KUEUELOG_ELASTIC_QUOTA_TREE", "").strip().lower()
    if flag is None and raw not in _TRUE + _FALSE:
        raise BadSetting(f"KUEUELOG_ELASTIC_QUOTA_TREE: expected true or false, got {raw!r}")
    wanted = flag if flag is not None else raw in _TRUE
    if wanted and not kube:
        raise SettingsError("--elastic-quota-tree: only 'run actuator --kube' keeps the tree's Kueue objects")
    return bool(wanted)


def _job_kinds(args: argparse.Namespace, environ: Mapping[str, str]) -> tuple[str, ...]:
    from events.jobkinds import parse_kind_names

    flag = getattr(args, "job_kinds", None)
    text, where = (flag, "--job-kinds") if flag is not None else (environ.get("KUEUELOG_JOB_KINDS", ""),
                                                                  "KUEUELOG_JOB_KINDS")
    try:
        return parse_kind_names(text)
    except ValueError as e:
        raise SettingsError(f"{where}: {e}") from None


def _shard_map(args: argparse.Namespace) -> ShardMap | None:
    from events.shardmap import ShardMapError
    from services.runtime.shards import load_shard_map

    path = getattr(args, "shard_map", None)
    if not path:
        return None
    try:
        return load_shard_map(path)
    except ShardMapError as e:
        raise BadSetting(f"--shard-map: {e}") from None


def _heartbeat(args: argparse.Namespace, environ: Mapping[str, str]) -> float:
    flag = getattr(args, "heartbeat", None)
    text, where = (flag, "--heartbeat") if flag is not None else (environ.get("KUEUELOG_HEARTBEAT", "0"),
                                                                  "KUEUELOG_HEARTBEAT")
    try:
        seconds = float(text)
    except ValueError:
        raise SettingsError(f"{where}: expected a number of seconds, got {text!r}") from None
    if not 0 <= seconds <= 3600:  # NaN fails this too
        raise SettingsError(f"{where}: must be between 0 (off) and 3600 seconds, got {text!r}")
    return seconds


def run_settings(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> RunSettings:
    """The settings of ``kueuelog run SERVICE`` from its flags and the environment."""
    o = run_options(args, environ)
    log = log_settings(args, create=True, environ=environ)
    kube = KubeSettings(kubeconfig=o.kubeconfig, context=o.context)
    seed = tuple(args.seed or ())
    clock: ClockMode = args.clock
    try:
        provisioning = tuple(sorted(parse_all(getattr(args, "provisioning", None) or []).items()))
    except BehaviourError as e:
        raise SettingsError(str(e)) from None
    match o.service:
        case "scheduler":
            return SchedulerSettings(log=log, http=o.http, cluster=o.cluster, seed=seed)
        case "watcher":
            return WatcherSettings(log=log, http=o.http, cluster=o.cluster, kube=kube,
                                   t9k=bool(getattr(args, "t9k", False)), job_kinds=_job_kinds(args, environ),
                                   shard_map=_shard_map(args), heartbeat_s=_heartbeat(args, environ))
        case "actuator":
            return ActuatorSettings(log=log, http=o.http, cluster=o.cluster, kube=kube if o.kube else None,
                                    policy=o.policy, qps=float(args.qps), burst=int(args.burst),
                                    elastic_quota_tree=_elastic_quota_tree(args, environ, kube=o.kube),
                                    t9k=bool(getattr(args, "t9k", False)),
                                    job_kinds=_job_kinds(args, environ) if o.kube else ())
        case "simcluster":
            shard_map = _shard_map(args)
            if shard_map is not None and shard_map.shards > 1 and seed and clock != "real":
                raise SettingsError("--shard-map with --seed needs --clock real: each shard's simulated "
                                    "cluster keeps its own simulated time")
            return SimclusterSettings(log=log, http=o.http, cluster=o.cluster, clock=clock, seed=seed,
                                      compress=int(args.compress), provisioning=provisioning, shard_map=shard_map)
        case "all":
            return AllSettings(log=log, http=o.http, cluster=o.cluster, clock=clock, seed=seed,
                               compress=int(args.compress), until_done=args.until_done, provisioning=provisioning)
        case _:
            assert_never(o.service)


# --- building and running a service ----------------------------------------------------------------


@dataclass
class _Context:
    """What :func:`run` hands every service: its log, ``stop``, readiness and metrics (``on_step``
    feeds the scheduler's, registered from the start so that a standby's /metrics shows them)."""

    log: Log
    stop: asyncio.Event
    status: ServiceStatus
    registry: CollectorRegistry
    on_step: StepHook | None = None


def run(settings: RunSettings, environ: Mapping[str, str] = os.environ) -> int:
    """Build the service of ``settings`` and run it until SIGINT or SIGTERM (or, for ``all`` in
    simulated time, until nothing is left); 0 then. A log that cannot be reached yet (a broker
    not up) is waited for with back-off, as at run time; anything that ends the service for good
    is raised for the command line to turn into its exit code (:mod:`services.app.exits`)."""
    log = _open_patiently(settings, environ)
    if log is None:
        return 0  # stopped while waiting for the log
    try:
        return asyncio.run(_serve(settings, log))
    finally:
        log.close()


def _open_patiently(settings: RunSettings, environ: Mapping[str, str]) -> Log | None:
    """``open_log`` until it succeeds, fails for good, or SIGINT/SIGTERM (None)."""
    from services.runtime.supervise import Backoff, report_unavailable

    stopped = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stopped.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    backoff = Backoff(first=0.5, cap=30.0)
    try:
        while True:
            try:
                return open_log(settings.log, role=settings.writer, environ=environ)
            except Refused:
                raise
            except LogError as e:
                if not e.retriable:
                    raise
                wait = backoff.next()
                report_unavailable(settings.name, e, wait)
                if stopped.wait(wait):
                    return None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


async def _serve(settings: RunSettings, log: Log) -> int:
    from prometheus_client import CollectorRegistry, ProcessCollector

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    cfg: client.Configuration | None = None
    if (kube := _kube(settings)) is not None:
        from services.runtime.kubeclient import KubeConfigError, client_configuration

        try:
            cfg = await client_configuration(kube.kubeconfig, context=kube.context)
        except KubeConfigError as e:
            raise BadSetting(str(e)) from None
    context = _Context(log, stop, ServiceStatus(settings.name, leading=settings.leads is None),
                       CollectorRegistry(auto_describe=True))
    if isinstance(settings, SchedulerSettings | AllSettings):
        context.on_step = _scheduler_hook(context.registry)
    ProcessCollector(registry=context.registry)
    server = await _health_server(settings.http, context)
    try:
        await _run_service(settings, context, cfg)
    finally:
        if server is not None:
            await server.stop()
    return 0


def _kube(settings: RunSettings) -> KubeSettings | None:
    match settings:
        case WatcherSettings() | ActuatorSettings():
            return settings.kube
        case _:
            return None


async def _health_server(http: HttpSettings, context: _Context) -> HealthServer | None:
    """The service's /healthz, /readyz and /metrics; None when off, or when the default port is
    taken (a port that was asked for and cannot be served is an error)."""
    from services.runtime.health import Check, HealthServer

    if http.port == 0:
        return None
    status = context.status

    def ready() -> Check:
        return Check(status.ready, status.reason)

    server = HealthServer(context.registry, ready, host=http.host, port=http.port)
    try:
        await server.start()
    except OSError as e:
        if http.explicit:
            raise BadSetting(f"--http-port: cannot serve /healthz, /readyz and /metrics on {http.host}:"
                                f"{http.port}: {e.strerror or e}") from None
        print(f"warning: not serving /healthz, /readyz and /metrics: {http.host}:{http.port}: {e.strerror or e} "
              f"(choose a port with --http-port or KUEUELOG_HTTP_PORT, 0 for none)", file=sys.stderr)
        return None
    return server


async def _run_service(settings: RunSettings, context: _Context, cfg: client.Configuration | None) -> None:
    """Take the service's role (a standby waits here on Kafka), then run it."""
    role = settings.leads
    if role is not None:
        if not await lead(context.log, role, context.stop):
            return
        context.status.leading = True
    try:
        match settings:
            case AllSettings():
                await _all(settings, context)
            case SchedulerSettings():
                await _scheduler(settings, context)
            case WatcherSettings():
                await _watcher(settings, context, cfg)
            case ActuatorSettings():
                await _actuator(settings, context, cfg)
            case SimclusterSettings():
                await _simcluster(settings, context)
            case _:
                assert_never(settings)
    finally:
        if role is not None:
            release(context.log, role)


def _scheduler_hook(registry: CollectorRegistry) -> StepHook:
    from services.scheduler.metrics import SchedulerMetrics
    from services.scheduler.runner import observe_scheduler

    return observe_scheduler(SchedulerMetrics(registry, gauge_interval_s=None))


async def _scheduler(settings: SchedulerSettings, context: _Context) -> None:
    from services.runtime.clock import wall_clock_ms
    from services.scheduler.runner import run_scheduler

    seed_scheduler(settings, context.log, wall_clock_ms())
    # Real time: the scheduler appends a tick when one of its deadlines comes (waitForPodsReady).
    await run_scheduler(context.log, context.stop, topics=settings.log.topics, status=context.status,
                        on_step=context.on_step, long_poll=True, wall_clock=wall_clock_ms)


def seed_scheduler(settings: SchedulerSettings, log: Log, now: int) -> int:
    """Append the ``--seed`` manifests once (ids from their content: a restart appends nothing new);
    returns how many were appended. Bad input raises ManifestError, as a bad seed of ``run all``."""
    from events.manifests import load
    from services.simcluster.arrivals import read_files, seed_all

    if not settings.seed:
        return 0
    objects = load(read_files(list(settings.seed)))
    return seed_all(log, objects, topics=settings.log.topics, cluster=settings.cluster, now=now)


def _arrivals(settings: SimclusterSettings, log: Log) -> ArrivalStream | None:
    """The seeded manifests: in simulated time from the start, in real time from now."""
    from services.app.convert import expand
    from services.runtime.clock import wall_clock_ms
    from services.simcluster.arrivals import ArrivalStream, read_files

    if not settings.seed:
        return None
    start = None if settings.clock == "simulated" else wall_clock_ms()
    return ArrivalStream.from_files(log, read_files(list(settings.seed)), start=start, compress=settings.compress,
                                    cluster=settings.cluster, topics=settings.log.topics, expand=expand)


async def _all(settings: AllSettings, context: _Context) -> None:
    from services.app.driver import run_all
    from services.simcluster.cluster import SimConfig

    result = await run_all(context.log, clock=settings.clock, stop=context.stop,
                           arrivals=_arrivals(settings, context.log),
                           config=SimConfig(cluster=settings.cluster, provisioning=settings.provisioning),
                           until_done=settings.until_done, topics=settings.log.topics, status=context.status,
                           on_step=context.on_step)
    print(f"stopped: {result.scheduler.stats.cycles} cycles, {result.scheduler.stats.decisions} decisions")


async def _simcluster(settings: SimclusterSettings, context: _Context) -> None:
    """With seeded manifests it also submits them: in simulated time as it advances the clock, in
    real time as the wall clock reaches them (resuming after a restart: see ArrivalStream)."""
    from services.runtime.supervise import Bell
    from services.simcluster.cluster import SimConfig
    from services.simcluster.runner import run_arrivals, run_simcluster

    stream, bell = _arrivals(settings, publishing_log(settings, context.log) if settings.seed else context.log), Bell()
    run_sim = run_simcluster(context.log, context.stop, clock=settings.clock,
                             config=SimConfig(cluster=settings.cluster, provisioning=settings.provisioning),
                             topics=settings.log.topics,
                             status=context.status, arrivals=stream, bell=bell, long_poll=True,
                             role=settings.leads)
    if stream is None or settings.clock == "simulated":
        await run_sim
    else:
        await asyncio.gather(run_sim, run_arrivals(stream, context.stop, bell=bell))


async def _watcher(settings: WatcherSettings, context: _Context, cfg: client.Configuration | None) -> None:
    from services.runtime.kubeclient import api_client
    from services.runtime.shards import RoutingLog
    from services.watcher.service import WatcherService

    assert cfg is not None  # the watcher always has a Kubernetes configuration
    log = publishing_log(settings, context.log)
    async with api_client(cfg) as api:
        watcher = WatcherService(log, api, cluster=settings.cluster, topics=settings.log.topics,
                                 status=context.status, t9k=settings.t9k, job_kinds=settings.job_kinds,
                                 heartbeat_s=settings.heartbeat_s)
        context.registry.register(watcher.collector())
        # Tree hand-overs go on while nothing is published (events.shardmap).
        pumping = asyncio.create_task(log.pump_until(context.stop)) if isinstance(log, RoutingLog) else None
        try:
            await watcher.run(context.stop)
        finally:
            if pumping is not None:
                pumping.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pumping
            if log is not context.log:
                assert isinstance(log, RoutingLog)
                for shard in log.shards[1:]:
                    shard.close()


def publishing_log(settings: WatcherSettings | SimclusterSettings, log: Log,
                   environ: Mapping[str, str] = os.environ) -> Log:
    """What the watcher (or the simulated cluster's seeding) publishes through: ``log`` itself, or
    with a shard map of several shards a router over every shard's log (``log`` is shard 0's)."""
    from services.runtime.shards import RoutingLog, embedded_shards

    shard_map = settings.shard_map
    if shard_map is None or shard_map.shards == 1:
        return log
    if settings.log.shard != 0:
        raise SettingsError(f"a {settings.name} with --shard-map publishes to every shard: run it with --shard 0")
    if settings.log.bootstrap_servers:
        shards = [log] + [open_log(dataclasses.replace(settings.log, shard=s), environ=environ,
                                   shards=shard_map.shards) for s in range(1, shard_map.shards)]
    else:
        shards = embedded_shards(log, shard_map.shards)
    return RoutingLog(shards, shard_map, topics=settings.log.topics)


async def _actuator(settings: ActuatorSettings, context: _Context, cfg: client.Configuration | None) -> None:
    topics = settings.log.topics
    if cfg is None:
        from services.actuator.runner import run_actuator
        from services.actuator.sim_multikueue import SimMultiKueuePort

        # The simulated cluster, and MultiKueue placements on simulated workers (each its own
        # ``SimConfig.cluster`` on the same topic).
        port = SimMultiKueuePort(topics, settings.cluster)
        await run_actuator(context.log, context.stop, port=port, topics=topics, status=context.status,
                           long_poll=True, role=settings.leads, placer=port)
        return
    from services.actuator.service import ActuatorService
    from services.runtime.kubeclient import api_client

    async with api_client(cfg) as api:
        actuator = ActuatorService(context.log, api, cluster=settings.cluster, topics=topics,
                                   policy=settings.policy, qps=settings.qps, burst=settings.burst,
                                   status=context.status, elastic_quota_tree=settings.elastic_quota_tree,
                                   t9k=settings.t9k, job_kinds=settings.job_kinds)
        context.registry.register(actuator.collector())
        await actuator.run(context.stop)
