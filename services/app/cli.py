"""The ``kueuelog`` command line.

Subcommands are thin: each parses its flags, calls into the core or a service
shell, and renders the result. Exit codes: 0 success, 1 a check failed
(e.g. ``replay --verify``), 2 bad input or usage.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import yaml

from events.manifests import ManifestError


class _PlainDumper(yaml.SafeDumper):
    """Safe YAML that writes closed-set values (``StrEnum`` members, str subclasses) as the plain
    strings they are, as the JSON encoder does."""


_PlainDumper.add_multi_representer(str, lambda dumper, value: dumper.represent_str(str(value)))


def _simulate(args: argparse.Namespace) -> int:
    from services.app.simulate import simulate
    from services.core.render import summary_row, workload_list

    if args.cycles is not None and args.cycles < 0:
        print("error: --cycles must be a non-negative integer", file=sys.stderr)
        return 2
    try:
        result = simulate(args.files, args.cycles)
    except ManifestError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: cannot read {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    doc = workload_list(result.state)
    if args.output == "json":
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif args.output == "yaml":
        yaml.dump(doc, sys.stdout, Dumper=_PlainDumper, sort_keys=False, default_flow_style=False)
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"kueuelog simulate — {result.cycles} cycle(s)", expand=False)
        for col in ("WORKLOAD", "QUEUE", "CLUSTERQUEUE", "STATE", "FLAVORS", "REASON"):
            table.add_column(col, overflow="fold")
        for key in sorted(result.state.workloads):
            table.add_row(*summary_row(result.state, result.state.workloads[key]))
        Console(width=200).print(table)
    return 0


def _add_log_options(p: argparse.ArgumentParser, *, path_flag: bool = True, create: bool = False) -> None:
    """Where the log is: an embedded log directory, or a Kafka cluster (flags, or KUEUELOG_KAFKA_*)."""
    where = p.add_argument_group("log", "the embedded log (--log) or Kafka (--bootstrap-servers, or "
                                        "KUEUELOG_KAFKA_BOOTSTRAP_SERVERS; security settings from "
                                        "KUEUELOG_KAFKA_SECURITY_PROTOCOL, _SASL_MECHANISM, _SASL_USERNAME, "
                                        "_SASL_PASSWORD, _SSL_CAFILE, _SSL_CERTFILE, _SSL_KEYFILE)")
    if path_flag:
        where.add_argument("--log", metavar="PATH",
                           help="the embedded log directory" + (" (created if missing)" if create else ""))
    where.add_argument("--bootstrap-servers", metavar="HOST:PORT,...", help="read and write Kafka topics instead")
    where.add_argument("--topic-prefix", default=os.environ.get("KUEUELOG_TOPIC_PREFIX", "kueuelog"),
                       metavar="PREFIX", help="topic names are PREFIX.cluster-events, PREFIX.decisions, ... "
                                              "(default: kueuelog, or KUEUELOG_TOPIC_PREFIX)")
    where.add_argument("--shard", type=int, default=int(os.environ.get("KUEUELOG_SHARD", "0")), metavar="N",
                       help="the scheduler shard (Kafka partition) to use (default: 0, or KUEUELOG_SHARD)")


def _refuse(message: str) -> NoReturn:
    """Bad input or usage: the reason on stderr, exit status 2."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


_OPENED: list[Any] = []  # logs opened by this command, closed when it ends (clients, file locks)


def _topics(args: argparse.Namespace) -> object:
    from events.envelope import Topics

    return Topics(prefix=args.topic_prefix)


def _open_log(args: argparse.Namespace, *, path: str | None = None, role: str | None = None,
              create: bool = False) -> object:
    """The embedded log at ``path``/--log, or Kafka when bootstrap servers are given; exits 2 with
    the reason when neither is usable."""
    from services.runtime.log import LogError
    from services.runtime.sqlite import SqliteLog

    path = path or getattr(args, "log", None)
    bootstrap = args.bootstrap_servers or (None if path else os.environ.get("KUEUELOG_KAFKA_BOOTSTRAP_SERVERS"))
    if path and bootstrap:
        _refuse("error: give either an embedded log (--log/LOG) or --bootstrap-servers, not both")
    try:
        if bootstrap:
            from services.runtime.kafka import KafkaLog, KafkaSettings

            try:
                settings = KafkaSettings.from_env(bootstrap_servers=bootstrap)
                kafka = KafkaLog(settings, prefix=args.topic_prefix, shard=args.shard, role=role)
            except ValueError as e:
                _refuse(f"error: {e}")
            _OPENED.append(kafka)
            return kafka
        if not path:
            _refuse("error: no log given: use --log PATH (the embedded log) or --bootstrap-servers")
        embedded = SqliteLog(path, create=create)
        _OPENED.append(embedded)
        return embedded
    except LogError as e:
        _refuse(f"error: {e}")


def _replay(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from services.app.logview import replay, resolve_until

    log = _open_log(args, path=args.log_path)
    topics = _topics(args)
    try:
        until = resolve_until(log, topics, args.until)  # type: ignore[arg-type]
    except ValueError as e:
        print(f"error: --until: {e}", file=sys.stderr)
        return 2
    err = Console(stderr=True)
    with Progress(TextColumn("replay"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task("replay", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        report = replay(log, topics, verify=args.verify, until=until, progress=progress)  # type: ignore[arg-type]
    print(f"replayed {report.events} events and {report.cycles} cycles ({report.decisions} decisions, "
          f"{report.dead_letters} dead letters) up to input offset {report.input_offset}")
    if args.verify:
        if report.mismatches:
            for cycle, problem in report.mismatches[:20]:
                print(f"MISMATCH cycle {cycle}: {problem}")
            print(f"verify: {len(report.mismatches)} cycle(s) differ from the recorded decisions")
            return 1
        print(f"verify: all {report.cycles} cycles reproduce their recorded decisions byte for byte")
    return 0


def _explain(args: argparse.Namespace) -> int:
    from services.app.logview import explain

    if "/" not in args.workload:
        print("error: WORKLOAD must be NAMESPACE/NAME (a Workload or the Job that owns it)", file=sys.stderr)
        return 2
    for line in explain(_open_log(args), _topics(args), args.workload, at=args.at):  # type: ignore[arg-type]
        print(line)
    return 0


def _tail(args: argparse.Namespace) -> int:
    import asyncio

    from services.app.logview import tail

    types = {t.strip() for t in args.type.split(",") if t.strip()} if args.type else set()
    unknown = types - {"Admit", "Evict", "Pending"}
    if unknown:
        print(f"error: --type: unknown decision type(s) {sorted(unknown)}; use Admit, Evict, Pending",
              file=sys.stderr)
        return 2
    stop = asyncio.Event()

    async def main() -> None:
        await tail(_open_log(args), _topics(args), types=types, queue=args.queue,  # type: ignore[arg-type]
                   from_start=args.from_start, emit=lambda line: print(line, flush=True), stop=stop)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
    return 0


def _schema(args: argparse.Namespace) -> int:
    from pathlib import Path

    from services.app.schema import asyncapi, json_schemas

    docs = {**json_schemas(), "asyncapi.json": asyncapi()}
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        for name, doc in docs.items():
            (out / name).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
            print(out / name)
    else:
        json.dump(docs, sys.stdout, indent=2)
        sys.stdout.write("\n")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.console import Console

    from services.app.demo import new_directory, run_demo, summary

    paths = args.files or sorted(str(p) for p in Path("examples").glob("*.yaml"))
    if not paths:
        print("error: no manifests given and no examples/*.yaml here", file=sys.stderr)
        return 2
    directory = Path(args.dir) if args.dir else new_directory(Path.cwd())
    if directory.exists() and any(directory.iterdir()):
        print(f"error: {directory} is not empty; the demo writes a fresh log", file=sys.stderr)
        return 2
    console = Console()
    try:
        result = run_demo(paths, directory, console=console, pace=args.pace,
                          default_duration_ms=args.default_duration * 1000)
    except ManifestError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    console.print()
    for line in summary(result):
        console.print(line, highlight=False, soft_wrap=True)
    return 0


DEFAULT_HTTP_PORT = 8080


class _Usage(Exception):
    """A bad flag or setting of ``run``: exit 2 with the message."""


def _http_port(args: argparse.Namespace) -> tuple[int, bool]:
    """(port, whether it was asked for): --http-port, else KUEUELOG_HTTP_PORT, else 8080; 0 is off."""
    explicit = args.http_port is not None or bool(os.environ.get("KUEUELOG_HTTP_PORT"))
    raw = args.http_port if args.http_port is not None else os.environ.get("KUEUELOG_HTTP_PORT") or DEFAULT_HTTP_PORT
    try:
        port = int(raw)
    except ValueError:
        raise _Usage(f"KUEUELOG_HTTP_PORT: expected a port number, got {raw!r}") from None
    if not 0 <= port <= 65535:
        raise _Usage(f"--http-port: {port} is not a port number (0 turns the HTTP endpoints off)")
    return port, explicit


def _kube_wanted(args: argparse.Namespace) -> bool:
    if args.service == "watcher":
        return True
    if args.service != "actuator":
        if args.kube:
            raise _Usage(f"--kube: 'run {args.service}' does not talk to Kubernetes (only watcher and actuator do)")
        return False
    if args.kube is not None:
        return bool(args.kube)
    raw = os.environ.get("KUEUELOG_KUBE", "").strip().lower()
    if raw not in ("", "0", "false", "no", "1", "true", "yes"):
        raise _Usage(f"KUEUELOG_KUBE: expected true or false, got {raw!r}")
    return raw in ("1", "true", "yes")


def _run_settings(args: argparse.Namespace) -> tuple[bool, str | None, str, str, tuple[int, bool]]:
    """(kube, kubeconfig, cluster, job policy, http port) from flags and KUEUELOG_... variables."""
    kube = _kube_wanted(args)
    kubeconfig = args.kubeconfig or os.environ.get("KUEUELOG_KUBECONFIG") or os.environ.get("KUBECONFIG") or None
    cluster = args.cluster or os.environ.get("KUEUELOG_CLUSTER") or ("default" if kube else "sim")
    policy = args.job_policy or os.environ.get("KUEUELOG_JOB_POLICY") or "suspend"
    if policy not in ("suspend", "reject"):
        raise _Usage(f"KUEUELOG_JOB_POLICY: expected suspend or reject, got {policy!r}")
    if args.seed and args.service not in ("all", "simcluster"):
        raise _Usage(f"--seed: 'run {args.service}' submits no manifests (only all and simcluster do)")
    return kube, kubeconfig, cluster, policy, _http_port(args)


async def _serve_http(registry: Any, status: Any, host: str, port: int, explicit: bool) -> Any:
    """The service's /healthz, /readyz and /metrics; None when off, or when the default port is
    taken (a port that was asked for and cannot be served is an error)."""
    from services.runtime.health import Check, HealthServer

    if port == 0:
        return None

    def ready() -> Check:
        return Check(status.ready, status.reason)

    server = HealthServer(registry, ready, host=host, port=port)
    try:
        await server.start()
    except OSError as e:
        if explicit:
            raise _Usage(f"--http-port: cannot serve /healthz, /readyz and /metrics on {host}:{port}: "
                         f"{e.strerror or e}") from None
        print(f"warning: not serving /healthz, /readyz and /metrics: {host}:{port}: {e.strerror or e} "
              f"(choose a port with --http-port or KUEUELOG_HTTP_PORT, 0 for none)", file=sys.stderr)
        return None
    return server


async def _run_service(args: argparse.Namespace, log: Any, topics: Any, stop: Any, *, status: Any, registry: Any,
                       on_step: Any, cfg: Any, cluster: str, policy: str) -> None:
    import asyncio

    from services.actuator.runner import run_actuator
    from services.app.driver import run_all
    from services.runtime.clock import wall_clock_ms
    from services.runtime.supervise import Bell, lead
    from services.scheduler.runner import run_scheduler
    from services.simcluster.arrivals import ArrivalStream, read_files
    from services.simcluster.cluster import SimConfig
    from services.simcluster.runner import run_arrivals, run_simcluster

    config = SimConfig(cluster=cluster)

    def arrivals() -> ArrivalStream | None:
        if not args.seed:
            return None
        start = None if args.clock == "simulated" else wall_clock_ms()
        return ArrivalStream.from_files(log, read_files(args.seed), start=start, compress=args.compress,
                                        cluster=cluster, topics=topics)

    if args.service == "scheduler":
        await run_scheduler(log, stop, topics=topics, status=status, on_step=on_step, long_poll=True)
        return
    if args.service == "all":
        result = await run_all(log, clock=args.clock, stop=stop, arrivals=arrivals(), config=config,
                                   until_done=args.until_done, topics=topics, status=status, on_step=on_step)
        print(f"stopped: {result.scheduler.stats.cycles} cycles, {result.scheduler.stats.decisions} decisions")
        return
    if args.service == "watcher":
        from services.runtime.kubeclient import api_client
        from services.watcher.service import WatcherService

        async with api_client(cfg) as api:
            watcher = WatcherService(log, api, cluster=cluster, topics=topics, status=status)
            registry.register(watcher.collector())
            await watcher.run(stop)
        return
    # One writer per role and shard (Kafka: replicas wait here as standbys).
    if not await lead(log, args.service, stop):
        return
    status.leading = True
    if args.service == "simcluster":
        # With --seed it also submits the manifests: in simulated time as it advances the clock,
        # in real time as the wall clock reaches them (resuming after a restart: see ArrivalStream).
        stream, bell = arrivals(), Bell()
        run_sim = run_simcluster(log, stop, clock=args.clock, config=config, topics=topics, status=status,
                                     arrivals=stream, bell=bell, long_poll=True)
        if stream is None or args.clock == "simulated":
            await run_sim
        else:
            await asyncio.gather(run_sim, run_arrivals(stream, stop, bell=bell))
    elif cfg is None:
        from services.actuator.sim_port import SimClusterPort

        await run_actuator(log, stop, port=SimClusterPort(topics, cluster), topics=topics, status=status,
                               long_poll=True)
    else:
        from services.actuator.service import ActuatorService
        from services.runtime.kubeclient import api_client

        async with api_client(cfg) as api:
            actuator = ActuatorService(log, api, cluster=cluster, topics=topics, policy=policy,  # type: ignore[arg-type]
                                       qps=args.qps, burst=args.burst, status=status)
            registry.register(actuator.collector())
            await actuator.run(stop)


def _run(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from prometheus_client import CollectorRegistry, ProcessCollector

    from services.runtime.log import LogError
    from services.runtime.supervise import LeadershipLost, ServiceStatus
    from services.scheduler.runner import observe_scheduler

    try:
        kube, kubeconfig, cluster, policy, (port, explicit) = _run_settings(args)
    except _Usage as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    # The watcher publishes without an election (any number of replicas, idempotent envelopes);
    # every other service is one writer per role and shard.
    log: Any = _open_log(args, role=None if args.service == "watcher" else args.service, create=True)
    topics: Any = _topics(args)

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        cfg = None
        if kube:
            from services.runtime.kubeclient import KubeConfigError, client_configuration

            try:
                cfg = await client_configuration(kubeconfig, context=args.context)
            except KubeConfigError as e:
                print(f"error: {e}", file=sys.stderr)
                return 2
        status = ServiceStatus(args.service, leading=args.service == "watcher")
        registry = CollectorRegistry(auto_describe=True)
        on_step = None
        if args.service in ("scheduler", "all"):
            from services.scheduler.metrics import SchedulerMetrics

            on_step = observe_scheduler(SchedulerMetrics(registry, gauge_interval_s=None))
        ProcessCollector(registry=registry)
        try:
            server = await _serve_http(registry, status, args.http_host, port, explicit)
        except _Usage as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        try:
            await _run_service(args, log, topics, stop, status=status, registry=registry, on_step=on_step, cfg=cfg,
                               cluster=cluster, policy=policy)
        except ManifestError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        finally:
            if server is not None:
                await server.stop()
        return 0

    try:
        return asyncio.run(main())
    except (LogError, LeadershipLost) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        log.close()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kueuelog",
        description="Kueue-compatible job queueing and quota admission, event-sourced.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sim = sub.add_parser(
        "simulate",
        help="run Kueue's admission on manifests, in simulated time",
        description=(
            "Apply Kueue manifests (ResourceFlavor, ClusterQueue, Cohort, LocalQueue, WorkloadPriorityClass, "
            "Workload, batch/v1 Job with kueue.x-k8s.io/queue-name, Namespace, PriorityClass, Configuration) "
            "in order, run scheduling cycles and print every Workload with its status. Without --cycles, "
            "cycles repeat until nothing changes; evictions complete at once between cycles. "
            "Invalid input exits 2 with an error naming file, document, object and field."
        ),
    )
    sim.add_argument("files", nargs="+", metavar="FILE", help="YAML files of Kubernetes objects")
    sim.add_argument("--cycles", type=int, default=None, metavar="N", help="run exactly N scheduling cycles")
    sim.add_argument("-o", "--output", choices=("json", "yaml", "table"), default="table")
    sim.set_defaults(func=_simulate)

    rep = sub.add_parser("replay", help="rebuild the scheduler's state from a log; --verify re-derives every decision",
                         description="Fold the input log and re-run every recorded cycle at the input offset it "
                                     "ran at. With --verify, exit 1 if any re-derived decision differs.")
    rep.add_argument("log_path", nargs="?", metavar="LOG",
                     help="the embedded log directory (as left by `kueuelog demo`); or use --bootstrap-servers")
    _add_log_options(rep, path_flag=False)
    rep.add_argument("--until", metavar="OFFSET|TIME", help="stop at this input offset or RFC 3339 time")
    rep.add_argument("--verify", action="store_true", help="compare re-derived decisions with the recorded ones")
    rep.set_defaults(func=_replay)

    exp = sub.add_parser("explain", help="why a workload is pending, where it was admitted, who preempted it")
    exp.add_argument("workload", metavar="NS/WORKLOAD", help="a Workload, or the Job that owns it")
    _add_log_options(exp)
    exp.add_argument("--at", type=int, metavar="OFFSET", help="as of this input offset")
    exp.set_defaults(func=_explain)

    tl = sub.add_parser("tail", help="follow decisions as they are committed")
    _add_log_options(tl)
    tl.add_argument("--type", metavar="Admit,Evict,Pending", help="only these decision types")
    tl.add_argument("--queue", metavar="CLUSTERQUEUE", help="only decisions about this ClusterQueue")
    tl.add_argument("--from-start", action="store_true", help="print the whole history first")
    tl.set_defaults(func=_tail)

    demo = sub.add_parser("demo", help="the whole loop on the embedded log, with a live view (make run)",
                          description="Seed a simulated cluster from manifests (examples/*.yaml by default), run "
                                      "scheduler, actuator and simulated cluster over a new embedded log in "
                                      "simulated time, show ClusterQueue usage and decisions live, and leave the "
                                      "log on disk for replay, explain and tail.")
    demo.add_argument("files", nargs="*", metavar="FILE", help="manifests (default: examples/*.yaml)")
    demo.add_argument("--dir", metavar="PATH", help="where to write the log (default: ./kueuelog-demo-<time>)")
    demo.add_argument("--pace", type=float, default=0.0, metavar="SECONDS",
                      help="real seconds to wait at each step of simulated time (to watch it unfold)")
    demo.add_argument("--default-duration", type=int, default=60, metavar="SECONDS",
                      help="how long a Job runs without a kueuelog.io/sim-duration annotation")
    demo.set_defaults(func=_demo)

    run = sub.add_parser(
        "run", help="run a service (or all of them) over the embedded log or Kafka",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run one service until SIGINT or SIGTERM, over the embedded log in PATH or Kafka topics:\n"
                    "  watcher     this cluster's Kueue objects, Jobs and Namespaces -> cluster events (Kubernetes)\n"
                    "  scheduler   the single writer: cluster events -> decisions\n"
                    "  actuator    decisions -> the simulated cluster; with --kube, -> this Kubernetes cluster "
                    "(Jobs unsuspended\n"
                    "              or suspended, Workload and queue status), with the job reconciler in the same "
                    "process\n"
                    "  simcluster  the simulated cluster that stands in for Kubernetes\n"
                    "  all         scheduler, actuator and simulated cluster in one process (in simulated time: "
                    "until\n"
                    "              nothing is left to do)\n"
                    "On Kafka every service but the watcher is one writer per shard: start as many replicas as you "
                    "like,\none leads and the others wait as standbys (not ready). Every service serves /healthz, "
                    "/readyz and\n/metrics on --http-port.",
        epilog="Kubernetes: --kubeconfig, else KUEUELOG_KUBECONFIG, else KUBECONFIG, else the pod's in-cluster "
               "configuration.\nEvery flag with a KUEUELOG_... variable named in its help takes it as its default.")
    run.add_argument("service", choices=("watcher", "scheduler", "actuator", "simcluster", "all"))
    _add_log_options(run, create=True)
    run.add_argument("--cluster", default=None,
                     help="the name this cluster's events and decisions carry (default: KUEUELOG_CLUSTER, else "
                          "'default' for Kubernetes and 'sim' for the simulated cluster)")
    kube = run.add_argument_group("Kubernetes", "watcher, and actuator --kube")
    kube.add_argument("--kube", action=argparse.BooleanOptionalAction, default=None,
                      help="actuator: apply decisions to Kubernetes and run the job reconciler, instead of the "
                           "simulated cluster (default: KUEUELOG_KUBE, else off)")
    kube.add_argument("--kubeconfig", metavar="PATH",
                      help="default: KUEUELOG_KUBECONFIG, else KUBECONFIG, else the in-cluster configuration")
    kube.add_argument("--context", metavar="NAME", help="the kubeconfig context (default: its current context)")
    kube.add_argument("--job-policy", choices=("suspend", "reject"), default=None,
                      help="a queued Job created running: suspend it until admitted, or reject it (label "
                           "kueuelog.io/rejected; it runs outside quota) (default: KUEUELOG_JOB_POLICY, else suspend)")
    kube.add_argument("--qps", type=float, default=os.environ.get("KUEUELOG_KUBE_QPS", "20"), metavar="N",
                      help="actuator: API requests per second (default: 20, or KUEUELOG_KUBE_QPS)")
    kube.add_argument("--burst", type=int, default=os.environ.get("KUEUELOG_KUBE_BURST", "40"), metavar="N",
                      help="actuator: API requests above --qps in a burst (default: 40, or KUEUELOG_KUBE_BURST)")
    http = run.add_argument_group("health and metrics", "/healthz (alive), /readyz (leading and recovered), "
                                                       "/metrics (Prometheus)")
    http.add_argument("--http-port", type=int, default=None, metavar="PORT",
                      help="default: KUEUELOG_HTTP_PORT, else 8080; 0 turns them off. A port asked for that cannot "
                           "be served is an error; the default 8080, when taken, only a warning")
    http.add_argument("--http-host", default=os.environ.get("KUEUELOG_HTTP_HOST", "0.0.0.0"), metavar="ADDRESS",
                      help="default: 0.0.0.0, or KUEUELOG_HTTP_HOST")
    simulated = run.add_argument_group("simulated cluster", "simcluster and all")
    simulated.add_argument("--clock", choices=("simulated", "real"), default="real",
                     help="time for the simulated cluster (default: real)")
    simulated.add_argument("--seed", nargs="*", metavar="FILE", help="'all' only: manifests to submit as they arrive")
    simulated.add_argument("--compress", type=int, default=1, metavar="N",
                     help="real clock: submit the seeded Jobs N times faster than their creationTimestamps")
    simulated.add_argument("--until-done", action=argparse.BooleanOptionalAction, default=None,
                     help="'all': stop once nothing is left to do (default: in simulated time only)")
    run.set_defaults(func=_run)

    sch = sub.add_parser("schema", help="JSON Schema of every message and an AsyncAPI document")
    sch.add_argument("--out", metavar="DIR", help="write one file per document into DIR")
    sch.set_defaults(func=_schema)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    finally:
        while _OPENED:
            _OPENED.pop().close()
    return code




def entrypoint() -> None:
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # `kueuelog explain ... | head`: the reader left; that is not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    sys.exit(code)


if __name__ == "__main__":
    entrypoint()
