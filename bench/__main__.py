"""``make bench``: every benchmark, figures printed for the README and issue notes.

``python -m bench`` runs them all (the Kafka ones last: they start a local broker);
``python -m bench kafka [--quick] ...`` only the Kafka ones (see ``bench.kafka``);
``python -m bench shards [...]`` the scheduler shards on the local broker (``bench.shards``, not in
the full run: it starts its broker again and takes minutes; ``--realtime``: the large-scale
scenario in real time with each shard's services as processes);
``python -m bench kube [--quick | --tiny | --seconds S] [--objects workloads|jobs]`` Kueue's baseline
through a real kube-apiserver (``bench.kube``, ``make bench-kube``; not in the full run: its full size
takes many minutes).
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

from bench import engine, kafka, kube, multicluster, replay, services, shards
from services.runtime.gctune import tune_gc


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM ends the bench as Ctrl-C does: through every ``finally``, so the broker, the control
    plane and the service processes it started are stopped, not left running."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    tune_gc()  # as every kueuelog command runs (services/runtime/gctune.py)
    if argv and argv[0] == "kafka":
        return kafka.cli(argv[1:])
    if argv and argv[0] == "shards":
        return shards.main(argv[1:])
    if argv and argv[0] == "kube":
        return kube.cli(argv[1:])
    if argv:
        print(f"usage: python -m bench [kafka [--quick] [--only ...] [--profile DIR] [--baseline-mode M] "
              f"| shards [...] | kube [--quick | --tiny | --seconds S] [--objects workloads|jobs]]; "
              f"got {' '.join(argv)}",
              file=sys.stderr)
        return 2
    for line in engine.main():
        print(line, flush=True)
    for line in replay.main():
        print(line, flush=True)
    for line in services.main():
        print(line, flush=True)
    for line in multicluster.main():
        print(line, flush=True)
    for line in kafka.main():
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
