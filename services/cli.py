"""The ``kueuelog`` command line.

Subcommands are thin: each parses its flags, calls into the core or a service
shell, and renders the result. Exit codes: 0 success, 1 a check failed
(e.g. ``replay --verify``), 2 bad input or usage.
"""

from __future__ import annotations

import argparse
import json
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
            table.add_row(*summary_row(result.state.workloads[key]))
        Console(width=200).print(table)
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())


def entrypoint() -> None:
    sys.exit(main())
