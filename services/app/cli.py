"""The ``kueuelog`` command line.

Subcommands are thin: each parses its flags, calls into the core or a service
shell, and renders the result. :func:`main` turns whatever ends a subcommand
into one line and an exit code (the table is in :mod:`services.app.exits`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

import yaml

from events.cluster import SIM_DURATION_ANNOTATION, SIM_READY_AFTER_ANNOTATION
from events.envelope import Topics
from services.app import shardcli, viewcli
from services.app.assembly import log_settings, open_log, run, run_settings
from services.app.exits import classify
from services.runtime.gctune import tune_gc

if TYPE_CHECKING:
    from services.core.state import State
    from services.runtime.log import Log


def _simulate(args: argparse.Namespace) -> int:
    from services.app.simulate import result_list, simulate
    from services.app.t9k_input import summary
    from services.core.render import summary_row

    if args.from_log is not None:
        return viewcli.what_if_command(args)
    if args.at is not None or args.for_ is not None:
        print("error: --at and --for go with --from-log", file=sys.stderr)
        return 2
    if not args.files:
        print("error: give the manifests to simulate (FILE...), or --from-log LOG", file=sys.stderr)
        return 2
    if args.cycles is not None and args.cycles < 0:
        print("error: --cycles must be a non-negative integer", file=sys.stderr)
        return 2
    from events.simautoscaler import BehaviourError, parse_all

    try:
        behaviours = parse_all(args.provisioning or [])
    except BehaviourError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    until = None
    if args.until is not None:
        from services.simcluster.durations import DurationError, parse_duration

        try:
            until = parse_duration(args.until)
        except DurationError as e:
            print(f"error: --until: {e}", file=sys.stderr)
            return 2
    if args.sim_pods is not None and (args.sim_pods < 0 or until is None):
        print("error: --sim-pods must be a non-negative integer, and needs --until", file=sys.stderr)
        return 2
    # Bad input: ManifestError, OSError (see exits.classify).
    result = simulate(args.files, args.cycles, until, args.sim_pods, behaviours)
    doc = result_list(result)
    if args.output == "json":
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif args.output == "yaml":
        yaml.safe_dump(doc, sys.stdout, sort_keys=False, default_flow_style=False)
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"kueuelog simulate — {result.cycles} cycle(s)", expand=False)
        for col in ("WORKLOAD", "QUEUE", "CLUSTERQUEUE", "STATE", "FLAVORS", "REASON"):
            table.add_column(col, overflow="fold")
        for key in sorted(result.state.workloads):
            table.add_row(*summary_row(result.state, result.state.workloads[key]))
        for wl, why in result.refused:
            table.add_row(*summary(wl, why))
        Console(width=200).print(table)
        _print_tree(result.state)
        _print_admission_fair_sharing(result.state)
    return 0


def _print_admission_fair_sharing(state: State) -> None:
    """Each LocalQueue's usage history, after simulate's table, when admission fair sharing is on."""
    from rich.console import Console
    from rich.table import Table

    from services.app.simulate import admission_fair_sharing_rows

    rows = admission_fair_sharing_rows(state)
    if not rows:
        return
    table = Table(title="Admission fair sharing", expand=False)
    for col in ("LOCALQUEUE", "CLUSTERQUEUE", "WEIGHT", "CONSUMED", "USAGE"):
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*row)
    Console(width=200).print(table)


def _print_tree(state: State) -> None:
    """An ElasticQuotaTree's nodes (min / max / used), after simulate's table, if there is one."""
    from rich.console import Console
    from rich.table import Table

    from services.core.treeview import tree_status

    nodes = tree_status(state)
    if not nodes:
        return
    table = Table(title="ElasticQuotaTree", expand=False)
    for col in ("NODE", "PARENT", "MIN", "MAX", "USED"):
        table.add_column(col, overflow="fold")
    for n in nodes:
        table.add_row(*(str(n[k]) if k in ("name", "parent") else
                        ", ".join(f"{r}={v}" for r, v in n[k].items())  # type: ignore[attr-defined]
                        for k in ("name", "parent", "min", "max", "used")))
    Console(width=200).print(table)


def _convert(args: argparse.Namespace) -> int:
    from services.app.convert import convert

    return convert(args.files)  # bad input: ManifestError, OSError (see exits.classify)


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
    where.add_argument("--shard", type=shardcli.parse_shard, default=shardcli.default_shard(), metavar="N",
                       help="the scheduler shard (Kafka partition) to use (default: 0, or KUEUELOG_SHARD); "
                            "replay, explain and tail also take 'all'")


_OPENED: list[Log] = []  # logs opened by this command, closed when it ends (clients, file locks)


def _topics(args: argparse.Namespace) -> Topics:
    return Topics(prefix=args.topic_prefix)


def _open_shards(args: argparse.Namespace, *, path: str | None = None) -> list[tuple[str, Log]]:
    """(label, log) of the shard --shard names ("" label), or of every shard ("shard N: ")."""
    shards = shardcli.open_shards(args, path=path)
    _OPENED.extend(log for _, log in shards)
    return [(f"shard {n}: " if args.shard == shardcli.ALL else "", log) for n, log in shards]


def _open_log(args: argparse.Namespace, *, path: str | None = None) -> Log:
    """The embedded log at ``path``/--log, or Kafka when bootstrap servers are given (a
    LogError or a BadSetting says why it is not usable)."""
    log = open_log(log_settings(args, path=path))
    _OPENED.append(log)
    return log


def _replay(args: argparse.Namespace) -> int:
    from services.app.logview import resolve_until

    topics = _topics(args)
    worst = 0
    for label, log in _open_shards(args, path=args.log_path):
        try:
            until = resolve_until(log, topics, args.until)
        except ValueError as e:
            print(f"error: {label}--until: {e}", file=sys.stderr)
            return 2
        worst = max(worst, _replay_one(args, log, topics, until, label))
    return worst


def _replay_one(args: argparse.Namespace, log: Log, topics: Topics, until: int | None, label: str) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from services.app.logview import replay

    err = Console(stderr=True)
    with Progress(TextColumn("replay"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task("replay", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        report = replay(log, topics, verify=args.verify, until=until, progress=progress)
    print(f"{label}replayed {report.events} events and {report.cycles} cycles ({report.decisions} decisions, "
          f"{report.dead_letters} dead letters) up to input offset {report.input_offset}")
    if report.unreadable_decisions:
        print(f"{label}warning: {report.unreadable_decisions} decision record(s) could not be read; their cycles "
              f"were decided again from the input (run `kueuelog log check` on the log for where)")
    if args.verify:
        if report.mismatches:
            for cycle, problem in report.mismatches[:20]:
                print(f"{label}MISMATCH cycle {cycle}: {problem}")
            print(f"{label}verify: {len(report.mismatches)} cycle(s) differ from the recorded decisions")
            return 1
        print(f"{label}verify: all {report.cycles} cycles reproduce their recorded decisions byte for byte")
    return 0


def _explain(args: argparse.Namespace) -> int:
    from services.app.logview import explain

    if "/" not in args.workload:
        print("error: WORKLOAD must be NAMESPACE/NAME (a Workload or the Job that owns it)", file=sys.stderr)
        return 2
    if args.shard == shardcli.ALL:
        return _explain_every_shard(args)
    if args.output == "json":
        from services.app.explainer import explain as explanation

        exp = explanation(_open_log(args), _topics(args), args.workload, at=args.at)
        json.dump(exp.to_json(full=args.full), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0 if exp.names else 1
    log = _open_log(args)
    lines = explain(log, _topics(args), args.workload, at=args.at, full=args.full)
    for line in lines:
        print(line)
    if lines and lines[0].startswith("no Workload"):
        print(shardcli.other_shards_hint(log, _topics(args), args.shard), end="")
    return 0


def _explain_every_shard(args: argparse.Namespace) -> int:
    """--shard all: the explanation from each shard that knows the workload (one, unless it was
    published before its LocalQueue and so waited on shard 0)."""
    from services.app.explainer import explain as explanation

    found: list[tuple[int, Any]] = []
    for n, log in shardcli.open_shards(args):
        _OPENED.append(log)
        exp = explanation(log, _topics(args), args.workload, at=args.at)
        if exp.names:
            found.append((n, exp))
    if args.output == "json":
        json.dump({str(n): exp.to_json(full=args.full) for n, exp in found}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0 if found else 1
    if not found:
        print(f"no Workload {args.workload} on any shard")
        return 0
    for n, exp in found:
        print(f"shard {n}:")
        for line in exp.lines(full=args.full):
            print(f"  {line}")
    return 0


def _tail(args: argparse.Namespace) -> int:
    import asyncio

    from services.app.logview import tail

    types = {t.strip() for t in args.type.split(",") if t.strip()} if args.type else set()
    unknown = types - set(TAIL_TYPE_NAMES)
    if unknown:
        print(f"error: --type: unknown decision type(s) {sorted(unknown)}; use {', '.join(TAIL_TYPE_NAMES)}",
              file=sys.stderr)
        return 2
    stop = asyncio.Event()

    def emitter(label: str) -> Callable[[str], None]:
        return lambda line: print(label + line, flush=True)

    async def main() -> None:
        await asyncio.gather(*(tail(log, _topics(args), types=types, queue=args.queue, from_start=args.from_start,
                                    emit=emitter(label), stop=stop) for label, log in _open_shards(args)))

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


def _example_manifests() -> list[str]:
    """examples/*.yaml in the current directory, else in the checkout this kueuelog runs from (an
    editable install, as `make run` makes), else those a wheel installed in
    <prefix>/share/kueuelog/examples, so the demo works from any directory."""
    import sysconfig
    from pathlib import Path

    checkout = Path(__file__).resolve().parents[2]
    installed = Path(sysconfig.get_path("data")) / "share" / "kueuelog" / "examples"
    for folder in (Path("examples"), checkout / "examples", installed):
        found = sorted(str(p) for p in folder.glob("*.yaml"))
        if found:
            return found
    return []


def _demo(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.console import Console

    from services.app.demo import new_directory, run_demo, summary

    if args.clusters is not None:
        from services.app.mcdemo import demo_command

        return demo_command(args)
    paths = args.files or _example_manifests()
    if not paths:
        print("error: no manifests given, and no examples/*.yaml here or beside this installation "
              "(give the manifests: kueuelog demo FILE...)", file=sys.stderr)
        return 2
    directory = Path(args.dir) if args.dir else new_directory(Path.cwd())
    if directory.exists() and any(directory.iterdir()):
        print(f"error: {directory} is not empty; the demo writes a fresh log", file=sys.stderr)
        return 2
    console = Console()
    viewcli.run_with_views(args, directory, console, lambda: run_demo(
        paths, directory, console=console, pace=args.pace, default_duration_ms=args.default_duration * 1000), summary)
    return 0


def _run(args: argparse.Namespace) -> int:
    return run(run_settings(args))


if TYPE_CHECKING:
    from typing import TypeAlias

    Subcommands: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]


def _simulate_parser(sub: Subcommands) -> None:
    sim = sub.add_parser(
        "simulate",
        help="run Kueue's admission on manifests, in simulated time",
        description=(
            "Apply Kueue manifests (ResourceFlavor, ClusterQueue, Cohort, LocalQueue, WorkloadPriorityClass, "
            "Workload, batch/v1 Job with kueue.x-k8s.io/queue-name, Namespace, PriorityClass, Configuration; "
            "JobSet, PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob, MPIJob, RayJob, RayCluster, RayService with "
            "the label; "
            "T9k Queue and Jobs on it, whose creation refusals are reported as Workloads with reason Rejected) "
            "in order, run scheduling cycles and print every Workload with its status. Without --cycles, "
            "cycles repeat until nothing changes; evictions complete at once between cycles. "
            "Invalid input exits 2 with an error naming file, document, object and field."
        ),
    )
    sim.add_argument("files", nargs="*", metavar="FILE", help="YAML files of Kubernetes objects (with --from-log: "
                                                              "the changes, applied at --at)")
    sim.add_argument("--cycles", type=int, default=None, metavar="N", help="run exactly N scheduling cycles")
    sim.add_argument("--until", default=None, metavar="DURATION",
                     help=f"advance simulated time this far (e.g. 2h): pods become ready after "
                          f"{SIM_READY_AFTER_ANNOTATION} (or never), runs end after {SIM_DURATION_ANNOTATION}, "
                          f"and waitForPodsReady timeouts, back-offs and maximum execution times fall due")
    sim.add_argument("--sim-pods", type=int, default=None, metavar="N",
                     help="with --until: the simulated cluster has room for N pods at once (default: for all); "
                          "pods of Jobs started together are placed in turn, so gangs can each get a part")
    viewcli.add_what_if_options(sim)
    sim.add_argument("-o", "--output", choices=("json", "yaml", "table"), default="table")
    sim.add_argument("--provisioning", action="append", metavar="CLASS=BEHAVIOUR",
                     help="how the simulated autoscaler answers ProvisioningRequests of a provisioning class: "
                          "succeed[:DURATION] (the default), fail:K[:DURATION] (K failures, then success), never, "
                          "revoke:DURATION; simulated time advances to each answer and to each admission "
                          "check's back-off (repeatable)")
    sim.set_defaults(func=_simulate)


def _convert_parser(sub: Subcommands) -> None:
    conv = sub.add_parser(
        "convert",
        help="print the Kueue manifests kueuelog makes of other schedulers' quota kinds (ElasticQuotaTree, ...)",
        description="Translate front-end kinds (another scheduler's quota objects) into the Kueue manifests "
                    "kueuelog runs them as, and print them (YAML) with notes on what has no Kueue equivalent; "
                    "Kueue's own kinds pass through unchanged. Invalid input exits 2, as for simulate.",
    )
    conv.add_argument("files", nargs="+", metavar="FILE", help="YAML files of Kubernetes objects")
    conv.set_defaults(func=_convert)


def _replay_parser(sub: Subcommands) -> None:
    rep = sub.add_parser("replay", help="rebuild the scheduler's state from a log; --verify re-derives every decision",
                         description="Fold the input log and re-run every recorded cycle at the input offset it "
                                     "ran at. With --verify, exit 1 if any re-derived decision differs.")
    rep.add_argument("log_path", nargs="?", metavar="LOG",
                     help="the embedded log directory (as left by `kueuelog demo`); or use --bootstrap-servers")
    _add_log_options(rep, path_flag=False)
    rep.add_argument("--until", metavar="OFFSET|TIME", help="stop at this input offset or RFC 3339 time")
    rep.add_argument("--verify", action="store_true", help="compare re-derived decisions with the recorded ones")
    rep.set_defaults(func=_replay)


def _explain_parser(sub: Subcommands) -> None:
    exp = sub.add_parser("explain", help="why a workload is pending, where it was admitted, who preempted it")
    exp.add_argument("workload", metavar="NS/WORKLOAD", help="a Workload, or the Job that owns it")
    _add_log_options(exp)
    exp.add_argument("--at", type=int, metavar="OFFSET", help="as of this input offset")
    exp.add_argument("--full", action="store_true", help="every entry of the history, no runs folded")
    exp.add_argument("-o", "--output", choices=("text", "json"), default="text")
    exp.set_defaults(func=_explain)


TAIL_TYPE_NAMES: Final = ("Admit", "Evict", "Pending", "AdmitChecked", "Status", "Place", "PlacementWaiting",
                          "RemovePlacement", "LocalQueueStatus")
"""``tail --type`` (services.app.logview.TAIL_TYPES, imported only when tail runs)."""


def _tail_parser(sub: Subcommands) -> None:
    tl = sub.add_parser("tail", help="follow decisions as they are committed")
    _add_log_options(tl)
    tl.add_argument("--type", metavar="TYPE[,TYPE]", help=f"only these decision types: {', '.join(TAIL_TYPE_NAMES)}")
    tl.add_argument("--queue", metavar="CLUSTERQUEUE", help="only decisions about this ClusterQueue")
    tl.add_argument("--from-start", action="store_true", help="print the whole history first")
    tl.set_defaults(func=_tail)


def _demo_parser(sub: Subcommands) -> None:
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
    demo.add_argument("--clusters", type=int, metavar="N",
                      help="MultiKueue: a manager and N simulated worker clusters (generated manifests unless "
                           "FILEs are given, whose workers' objects are annotated with their cluster, as for simulate)")
    demo.add_argument("--jobs", type=int, default=160, metavar="N",
                      help="with --clusters and no FILE: how many Jobs arrive on the manager (default 160)")
    viewcli.add_demo_web_options(demo)
    demo.set_defaults(func=_demo)


def _run_parser(sub: Subcommands) -> None:
    run = sub.add_parser(
        "run", help="run a service (or all of them) over the embedded log or Kafka",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run one service until SIGINT or SIGTERM, over the embedded log in PATH or Kafka topics:\n"
                    "  watcher     this cluster's Kueue objects, Jobs and Namespaces -> cluster events (Kubernetes)\n"
                    "  scheduler   the single writer: cluster events -> decisions\n"
                    "  actuator    decisions -> the simulated cluster (MultiKueue placements: the chosen simulated "
                    "worker);\n              with --kube, -> this Kubernetes cluster (Jobs unsuspended\n"
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
    run.add_argument("--shard-map", metavar="FILE", default=os.environ.get("KUEUELOG_SHARD_MAP") or None,
                     help="watcher, and simcluster --seed: publish to every scheduler shard, each cohort tree "
                          "to its own (YAML: {shards: N, trees: {ROOT: SHARD}}; default: one shard, or "
                          "KUEUELOG_SHARD_MAP)")
    _add_kube_options(run)
    _add_http_options(run)
    _add_simulated_options(run)
    run.set_defaults(func=_run)


def _add_kube_options(run: argparse.ArgumentParser) -> None:
    kube = run.add_argument_group("Kubernetes", "watcher, and actuator --kube")
    kube.add_argument("--kube", action=argparse.BooleanOptionalAction, default=None,
                      help="actuator: apply decisions to Kubernetes and run the job reconciler, instead of the "
                           "simulated cluster (default: KUEUELOG_KUBE, else off)")
    kube.add_argument("--kubeconfig", metavar="PATH",
                      help="default: KUEUELOG_KUBECONFIG, else KUBECONFIG, else the in-cluster configuration")
    kube.add_argument("--context", metavar="NAME", help="the kubeconfig context (default: its current context)")
    kube.add_argument("--job-kinds", default=None, metavar="KIND,...",
                      help="watcher: also watch these workload kinds besides batch/v1 Job; actuator --kube: also "
                           "hold, release and evict them (their CRDs must exist): JobSet, PyTorchJob, TFJob, "
                           "XGBoostJob, PaddleJob, JAXJob, MPIJob, RayJob, RayCluster, RayService; Pod (actuator: "
                           "queued pods, pod groups, Deployments' pods, StatefulSets in any namespace) "
                           "(default: KUEUELOG_JOB_KINDS, else none)")
    kube.add_argument("--t9k", action=argparse.BooleanOptionalAction,
                      default=os.environ.get("KUEUELOG_T9K", "").strip().lower() in ("1", "true", "yes"),
                      help="watcher: also watch T9k Scheduler's Queues (scheduler.tensorstack.dev; the CRD must "
                           "exist); actuator --kube: the job reconciler also takes Jobs on a T9k Queue "
                           "(default: KUEUELOG_T9K, else off)")
    kube.add_argument("--heartbeat", default=None, metavar="SECONDS",
                      help="watcher: append a tick under --cluster's name every SECONDS while its API server "
                           "answers: a MultiKueue worker's liveness (workerLostTimeout) (default: "
                           "KUEUELOG_HEARTBEAT, else 0: off)")
    kube.add_argument("--job-policy", choices=("suspend", "reject"), default=None,
                      help="a queued Job created running: suspend it until admitted, or reject it (label "
                           "kueuelog.io/rejected; it runs outside quota) (default: KUEUELOG_JOB_POLICY, else suspend)")
    kube.add_argument("--elastic-quota-tree", action=argparse.BooleanOptionalAction, default=None,
                      help="actuator --kube: keep the Kueue objects of ACK's ElasticQuotaTree in kube-system "
                           "(deploy/frontends/ack) (default: KUEUELOG_ELASTIC_QUOTA_TREE, else off)")
    kube.add_argument("--qps", type=float, default=os.environ.get("KUEUELOG_KUBE_QPS", "20"), metavar="N",
                      help="actuator: API requests per second (default: 20, or KUEUELOG_KUBE_QPS)")
    kube.add_argument("--burst", type=int, default=os.environ.get("KUEUELOG_KUBE_BURST", "40"), metavar="N",
                      help="actuator: API requests above --qps in a burst (default: 40, or KUEUELOG_KUBE_BURST)")


def _add_http_options(run: argparse.ArgumentParser) -> None:
    http = run.add_argument_group("health and metrics", "/healthz (alive), /readyz (leading and recovered), "
                                                       "/metrics (Prometheus)")
    http.add_argument("--http-port", type=int, default=None, metavar="PORT",
                      help="default: KUEUELOG_HTTP_PORT, else 8080; 0 turns them off. A port asked for that cannot "
                           "be served is an error; the default 8080, when taken, only a warning")
    http.add_argument("--http-host", default=os.environ.get("KUEUELOG_HTTP_HOST", "0.0.0.0"), metavar="ADDRESS",
                      help="default: 0.0.0.0, or KUEUELOG_HTTP_HOST")


def _add_simulated_options(run: argparse.ArgumentParser) -> None:
    simulated = run.add_argument_group("simulated cluster", "simcluster and all")
    simulated.add_argument("--clock", choices=("simulated", "real"), default="real",
                           help="time for the simulated cluster (default: real)")
    simulated.add_argument("--seed", nargs="*", metavar="FILE",
                           help="all and simcluster: manifests to submit as they arrive; scheduler: manifests "
                                "appended once at start, e.g. Kueue's Configuration (waitForPodsReady), which "
                                "no watcher reads from a cluster")
    simulated.add_argument("--compress", type=int, default=1, metavar="N",
                           help="real clock: submit the seeded Jobs N times faster than their creationTimestamps")
    simulated.add_argument("--provisioning", action="append", metavar="CLASS=BEHAVIOUR",
                           help="the simulated autoscaler: how ProvisioningRequests of a class are answered "
                                "(succeed[:DURATION], fail:K[:DURATION], never, revoke:DURATION; repeatable; "
                                "default succeed)")
    simulated.add_argument("--until-done", action=argparse.BooleanOptionalAction, default=None,
                           help="'all': stop once nothing is left to do (default: in simulated time only)")


def _log_parser(sub: Subcommands) -> None:
    lg = sub.add_parser("log", help="look after an embedded log (check)")
    what = lg.add_subparsers(dest="log_command", required=True)
    check = what.add_parser("check", help="is an embedded log sound? names each damaged record and where",
                            description="Check an embedded log directory: that it is a kueuelog log, SQLite's own "
                                        "integrity check, contiguous offsets, that every record decodes as its "
                                        "topic's type, and that no committed position is past its topic's end. "
                                        "Exit 0 when sound, 1 when damaged, 4 when it is not a log at all.")
    check.add_argument("dir", metavar="DIR", help="the embedded log directory")
    check.add_argument("--topic-prefix", default=os.environ.get("KUEUELOG_TOPIC_PREFIX", "kueuelog"),
                       metavar="PREFIX", help="the topics' prefix (default: kueuelog, or KUEUELOG_TOPIC_PREFIX)")
    check.set_defaults(func=_log_check)


def _log_check(args: argparse.Namespace) -> int:
    from services.app.logcheck import check_log
    from services.runtime.sqlite import SqliteLog

    log = SqliteLog(args.dir, create=False)
    _OPENED.append(log)
    report = check_log(log, Topics(prefix=args.topic_prefix))
    for line in report.lines:
        print(line)
    for problem in report.problems:
        print(f"PROBLEM {problem}")
    print("log check: sound" if report.sound else f"log check: {len(report.problems)} problem(s)")
    return 0 if report.sound else 1


def _schema_parser(sub: Subcommands) -> None:
    sch = sub.add_parser("schema", help="JSON Schema of every message and an AsyncAPI document")
    sch.add_argument("--out", metavar="DIR", help="write one file per document into DIR")
    sch.set_defaults(func=_schema)


def build_parser(prog: str = "kueuelog") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Kueue-compatible job queueing and quota admission, event-sourced.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    from services.app import webhook_cmd

    for add in (_simulate_parser, _convert_parser, _replay_parser, _explain_parser, _tail_parser, _demo_parser,
                _run_parser, _log_parser, _schema_parser, webhook_cmd.add_parser, *viewcli.PARSERS):
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "kueuelog") -> int:
    """Run one subcommand; whatever ends it becomes one line on stderr and an exit code
    (:mod:`services.app.exits` lists them)."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        code = 130
    except (BrokenPipeError, SystemExit):
        raise
    except Exception as e:  # the one place every error is turned into an exit code
        code, line = classify(e)
        print(line, file=sys.stderr)
    finally:
        while _OPENED:
            with contextlib.suppress(Exception):
                _OPENED.pop().close()
    return code


def kubectl_entrypoint() -> None:
    """``kubectl-kueuelog`` on PATH makes ``kubectl kueuelog explain ns/job`` work (kubectl's plugin
    mechanism runs it with the words after ``kueuelog``)."""
    entrypoint(prog="kubectl kueuelog")


def kubectl_complete_entrypoint() -> None:
    """``kubectl_complete-kueuelog``: kubectl's plugin completion (one candidate a line, then Cobra's
    ``:directive``)."""
    from services.app.completion import complete

    candidates, directive = complete(build_parser("kubectl kueuelog"), sys.argv[1:])
    print("\n".join([*candidates, f":{directive}"]))


def entrypoint(prog: str = "kueuelog") -> None:
    tune_gc()
    try:
        code = main(prog=prog)
        sys.stdout.flush()
    except BrokenPipeError:
        # `kueuelog explain ... | head`: the reader left; that is not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    sys.exit(code)


if __name__ == "__main__":
    entrypoint()
