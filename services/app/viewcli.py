"""The operator-facing commands of issue #18, kept out of ``cli.py`` (which every change touches):
``serve`` (the web view and Kueue's visibility API), ``get pending``, ``simulate --from-log``
(what-if), the web view ``demo`` opens, and ``completion``. ``cli.py`` registers them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import yaml

if TYPE_CHECKING:
    from typing import TypeAlias

    from rich.console import Console

    from events.envelope import Topics
    from services.app.web import Background
    from services.runtime.log import Log

    Subcommands: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

R = TypeVar("R")


def _log(args: argparse.Namespace, path: str | None = None) -> Log:
    from services.app.cli import _open_log

    return _open_log(args, path=path)


def _topics(args: argparse.Namespace) -> Topics:
    from services.app.cli import _topics as topics

    return topics(args)


def _add_log_options(p: argparse.ArgumentParser) -> None:
    from services.app.cli import _add_log_options as add

    add(p)


def what_if_command(args: argparse.Namespace) -> int:
    from services.app.logview import resolve_until
    from services.app.whatif import report_lines, to_json, what_if
    from services.simcluster.durations import DurationError, parse_duration

    if args.cycles is not None:
        print("error: --cycles does not go with --from-log (time runs forward instead; see --for)", file=sys.stderr)
        return 2
    try:
        for_ms = parse_duration(args.for_) if args.for_ is not None else None
    except DurationError as e:
        print(f"error: --for: {e}", file=sys.stderr)
        return 2
    log = _log(args, path=args.from_log)
    topics = _topics(args)
    try:
        at = resolve_until(log, topics, args.at)
    except ValueError as e:
        print(f"error: --at: {e}", file=sys.stderr)
        return 2
    result = what_if(log, topics, at=at, changes=args.files, for_ms=for_ms,
                     default_duration_ms=args.default_duration * 1000)
    if args.output == "json":
        json.dump(to_json(result), sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif args.output == "yaml":
        yaml.safe_dump(to_json(result), sys.stdout, sort_keys=False, default_flow_style=False)
    else:
        for line in report_lines(result):
            print(line)
    return 0


def demo_web(args: argparse.Namespace, directory: Path, console: Console) -> Background | None:
    """The web view over the demo's log, in a thread, on --web-port (a free port when that one
    is taken); None with --no-web."""
    from services.app.web import Background
    from services.runtime.sqlite import SqliteLog

    if not args.web:
        return None
    SqliteLog(directory).close()  # the log exists before the view follows it
    try:
        web = Background(directory, args.web_host, args.web_port)
        url = web.start()
    except OSError:
        web = Background(directory, args.web_host, 0)
        url = web.start()
    console.print(f"web view: {url}", highlight=False, soft_wrap=True)
    return web


def _serve(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from services.app.exits import ConfigurationError
    from services.app.web import serve_log
    from services.web.server import ListenError

    log = _log(args)

    async def main() -> None:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        await serve_log(log, _topics(args), args.host, args.port, stop,
                        lambda url: print(f"kueuelog web view at {url}", flush=True))

    try:
        asyncio.run(main())
    except ListenError as e:
        raise ConfigurationError(str(e)) from None
    return 0


def _get_pending(args: argparse.Namespace) -> int:
    from events.cluster import PENDING_REASON_ANNOTATION
    from services.app.web import pending_documents
    from services.web.visibility import NotFound

    if args.namespace is not None and args.queue is None:
        print("error: --namespace names a LocalQueue's namespace: give the LocalQueue with --queue", file=sys.stderr)
        return 2
    try:
        docs = pending_documents(_log(args), _topics(args), args.queue, args.namespace, args.at)
    except NotFound as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.output == "json":
        json.dump(docs[0] if len(docs) == 1 else {"kind": "List", "apiVersion": "v1", "items": docs},
                  sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(f"{'CLUSTERQUEUE':<16} {'POS':>4} {'LQ POS':>6} {'WORKLOAD':<40} {'LOCALQUEUE':<14} {'PRIO':>5}  REASON")
    for doc in docs:
        cq = doc["metadata"].get("name", args.queue or "")
        for item in doc["items"]:
            meta = item["metadata"]
            reason = meta.get("annotations", {}).get(PENDING_REASON_ANNOTATION, "")
            print(f"{cq:<16} {item['positionInClusterQueue']:>4} {item['positionInLocalQueue']:>6} "
                  f"{meta['namespace'] + '/' + meta['name']:<40} {item['localQueueName']:<14} {item['priority']:>5}  "
                  f"{reason}")
    return 0


def _serve_parser(sub: Subcommands) -> None:
    srv = sub.add_parser("serve", help="the web view and Kueue's visibility API, read-only, from the log",
                         description="Follow the log read-only (any number of replicas) and serve the web view "
                                     "(cohorts, queues, workloads with their explain timeline, live decisions, "
                                     "usage plots; live over Server-Sent Events) and Kueue's visibility API "
                                     "(/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/CQ/pendingworkloads, "
                                     ".../namespaces/NS/localqueues/LQ/pendingworkloads).")
    _add_log_options(srv)
    srv.add_argument("--host", default=os.environ.get("KUEUELOG_WEB_HOST", "127.0.0.1"), metavar="ADDRESS",
                     help="default: 127.0.0.1, or KUEUELOG_WEB_HOST")
    srv.add_argument("--port", type=int, default=int(os.environ.get("KUEUELOG_WEB_PORT", "8090")), metavar="PORT",
                     help="default: 8090, or KUEUELOG_WEB_PORT; 0 picks a free one")
    srv.set_defaults(func=_serve)


def _get_parser(sub: Subcommands) -> None:
    get = sub.add_parser("get", help="read the scheduler's state: pending workloads in order")
    what = get.add_subparsers(dest="get_command", required=True)
    pending = what.add_parser("pending", help="pending workloads per ClusterQueue (or LocalQueue) in order, with "
                                              "their positions and why they wait (Kueue's visibility API)")
    pending.add_argument("--queue", metavar="Q", help="a ClusterQueue; with --namespace, a LocalQueue")
    pending.add_argument("--namespace", "-n", metavar="NS", help="the LocalQueue's namespace")
    pending.add_argument("--at", type=int, metavar="OFFSET", help="as of this input offset")
    pending.add_argument("-o", "--output", choices=("table", "json"), default="table",
                         help="json: Kueue's PendingWorkloadsSummary")
    _add_log_options(pending)
    pending.set_defaults(func=_get_pending)


def _completion(args: argparse.Namespace) -> int:
    from services.app import completion
    from services.app.cli import build_parser

    parser = build_parser()
    print((completion.zsh if args.shell == "zsh" else completion.bash)(parser, args.prog))
    return 0


def _completion_parser(sub: Subcommands) -> None:
    comp = sub.add_parser("completion", help="shell completion: source <(kueuelog completion bash)",
                          description="Print a completion script for bash or zsh, e.g. "
                                      "`source <(kueuelog completion bash)` in ~/.bashrc.")
    comp.add_argument("shell", choices=("bash", "zsh"))
    comp.add_argument("--prog", default="kueuelog", help="the command to complete (default: kueuelog; "
                                                         "kubectl-kueuelog for the kubectl plugin)")
    comp.set_defaults(func=_completion)



def keep_serving(args: argparse.Namespace, web: Background | None, console: Console) -> None:
    """``demo --keep-serving``: the web view stays up after the demo, until Ctrl-C."""
    import time

    if web is None or not args.keep_serving:
        return
    console.print(f"the demo is over; the web view stays at {web.url} until Ctrl-C")
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            time.sleep(3600)


def add_what_if_options(sim: argparse.ArgumentParser) -> None:
    whatif = sim.add_argument_group("what-if from a real log", "start from the state a log had at --at, apply "
                                    "FILE... (more quota, a new flavor, another priority), run forward with the "
                                    "recorded arrivals and run lengths, and compare with what really happened")
    whatif.add_argument("--from-log", metavar="LOG", help="the embedded log directory (as `kueuelog demo` leaves it)")
    whatif.add_argument("--at", metavar="OFFSET|TIME", help="input offset or RFC 3339 time (default: the end)")
    whatif.add_argument("--for", dest="for_", metavar="DURATION",
                        help="how far to run, e.g. 2h (default: to the log's last event)")
    whatif.add_argument("--default-duration", type=int, default=60, metavar="SECONDS",
                        help="run length of a workload the log never saw finish and without "
                             "kueuelog.io/sim-duration")
    whatif.add_argument("--topic-prefix", default=os.environ.get("KUEUELOG_TOPIC_PREFIX", "kueuelog"),
                        metavar="PREFIX", help="the log's topics' prefix (default: kueuelog, or KUEUELOG_TOPIC_PREFIX)")
    sim.set_defaults(bootstrap_servers=None, shard=0)


def add_demo_web_options(demo: argparse.ArgumentParser) -> None:
    demo.add_argument("--web", action=argparse.BooleanOptionalAction, default=True,
                      help="serve the web view while the demo runs and print its URL (default: on)")
    demo.add_argument("--web-host", default="127.0.0.1", metavar="ADDRESS", help="default: 127.0.0.1")
    demo.add_argument("--web-port", type=int, default=8090, metavar="PORT",
                      help="default: 8090 (a free port when it is taken)")
    demo.add_argument("--keep-serving", action="store_true",
                      help="keep the web view up after the demo ends, until Ctrl-C")


PARSERS: tuple[Callable[[Subcommands], None], ...] = (_serve_parser, _get_parser, _completion_parser)


def run_with_views(args: argparse.Namespace, directory: Path, console: Console, run: Callable[[], R],
                   summary: Callable[[R], Iterable[str]]) -> R:
    """A demo's run with the web view beside it (``demo_web``, ``--keep-serving``), then its summary
    printed under the live terminal view."""
    web = demo_web(args, directory, console)
    try:
        result = run()
        keep_serving(args, web, console)
    finally:
        if web is not None:
            web.stop()
    console.print()
    for line in summary(result):
        console.print(line, highlight=False, soft_wrap=True)
    return result
