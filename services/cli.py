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

import yaml

from events.manifests import ManifestError


def _simulate(args: argparse.Namespace) -> int:
    from services.scheduler.render import summary_row, workload_list
    from services.simulate import simulate

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
        yaml.safe_dump(doc, sys.stdout, sort_keys=False, default_flow_style=False)
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


def _open_log(path: str) -> object:
    from services.runtime.log import LogError, SqliteLog

    try:
        return SqliteLog(path, create=False)
    except LogError as e:
        raise SystemExit(f"error: {e}") from None


def _replay(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from events.envelope import Topics
    from services.inspect import replay, resolve_until

    log = _open_log(args.log)
    topics = Topics()
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
    from events.envelope import Topics
    from services.inspect import explain

    if "/" not in args.workload:
        print("error: WORKLOAD must be NAMESPACE/NAME (a Workload or the Job that owns it)", file=sys.stderr)
        return 2
    for line in explain(_open_log(args.log), Topics(), args.workload, at=args.at):  # type: ignore[arg-type]
        print(line)
    return 0


def _tail(args: argparse.Namespace) -> int:
    import asyncio

    from events.envelope import Topics
    from services.inspect import tail

    types = {t.strip() for t in args.type.split(",") if t.strip()} if args.type else set()
    unknown = types - {"Admit", "Evict", "Pending"}
    if unknown:
        print(f"error: --type: unknown decision type(s) {sorted(unknown)}; use Admit, Evict, Pending",
              file=sys.stderr)
        return 2
    stop = asyncio.Event()

    async def main() -> None:
        await tail(_open_log(args.log), Topics(), types=types, queue=args.queue,  # type: ignore[arg-type]
                   from_start=args.from_start, emit=lambda line: print(line, flush=True), stop=stop)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
    return 0


def _schema(args: argparse.Namespace) -> int:
    from pathlib import Path

    from services.schema import asyncapi, json_schemas

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

    from services.demo import new_directory, run_demo, summary

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


def _run(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from services.runtime import services as svc
    from services.runtime.log import LogError, SqliteLog
    from services.simcluster.cluster import SimConfig
    from services.watcher.seed import ArrivalStream, read_files

    try:
        log = SqliteLog(args.log)
    except LogError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        config = SimConfig(cluster=args.cluster)
        if args.service == "scheduler":
            await svc.run_scheduler(log, stop)
        elif args.service == "actuator":
            await svc.run_actuator(log, stop)
        elif args.service == "simcluster":
            await svc.run_simcluster(log, stop, clock=args.clock, config=config)
        else:
            arrivals = None
            if args.seed:
                start = None if args.clock == "simulated" else svc.wall_clock_ms()
                arrivals = ArrivalStream.from_files(log, read_files(args.seed), start=start,
                                                    compress=args.compress, cluster=args.cluster)
            result = await svc.run_all(log, clock=args.clock, stop=stop, arrivals=arrivals, config=config,
                                       until_done=args.until_done)
            print(f"stopped: {result.scheduler.stats.cycles} cycles, {result.scheduler.stats.decisions} decisions")

    try:
        asyncio.run(main())
    except LogError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        log.close()
    return 0


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
    rep.add_argument("log", metavar="LOG", help="the embedded log directory (as left by `kueuelog demo`)")
    rep.add_argument("--until", metavar="OFFSET|TIME", help="stop at this input offset or RFC 3339 time")
    rep.add_argument("--verify", action="store_true", help="compare re-derived decisions with the recorded ones")
    rep.set_defaults(func=_replay)

    exp = sub.add_parser("explain", help="why a workload is pending, where it was admitted, who preempted it")
    exp.add_argument("workload", metavar="NS/WORKLOAD", help="a Workload, or the Job that owns it")
    exp.add_argument("--log", required=True, metavar="PATH", help="the embedded log directory")
    exp.add_argument("--at", type=int, metavar="OFFSET", help="as of this input offset")
    exp.set_defaults(func=_explain)

    tl = sub.add_parser("tail", help="follow decisions as they are committed")
    tl.add_argument("--log", required=True, metavar="PATH", help="the embedded log directory")
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

    run = sub.add_parser("run", help="run a service (or all of them) over an embedded log",
                         description="Run the scheduler (the single writer), the actuator, the simulated cluster, "
                                     "or all three in one process, over the embedded log in PATH, until SIGINT or "
                                     "SIGTERM (or, for 'all' in simulated time, until nothing is left to do).")
    run.add_argument("service", choices=("scheduler", "actuator", "simcluster", "all"))
    run.add_argument("--log", required=True, metavar="PATH", help="the embedded log directory (created if missing)")
    run.add_argument("--clock", choices=("simulated", "real"), default="real",
                     help="time for the simulated cluster (default: real)")
    run.add_argument("--cluster", default="sim", help="cluster name stamped on the simulated cluster's events")
    run.add_argument("--seed", nargs="*", metavar="FILE", help="'all' only: manifests to submit as they arrive")
    run.add_argument("--compress", type=int, default=1, metavar="N",
                     help="real clock: submit the seeded Jobs N times faster than their creationTimestamps")
    run.add_argument("--until-done", action=argparse.BooleanOptionalAction, default=None,
                     help="'all': stop once nothing is left to do (default: in simulated time only)")
    run.set_defaults(func=_run)

    sch = sub.add_parser("schema", help="JSON Schema of every message and an AsyncAPI document")
    sch.add_argument("--out", metavar="DIR", help="write one file per document into DIR")
    sch.set_defaults(func=_schema)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = args.func(args)
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
