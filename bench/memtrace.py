"""Where a service process's memory grows: ``python -m bench.memtrace OUT [-m] MODULE [ARG ...]`` runs
``python -m MODULE ARG ...`` while a thread reads the process's resident set every 100 ms and
writes a line to OUT each time it moved by 8 MiB or more since the last line: seconds since
start, RSS in MiB, and the innermost frames of the main thread at that moment.

The Kafka benches start their service processes under it with ``--memtrace DIR`` (one file per
process). It found that the scheduler's peak RSS in Kueue's large-scale scenario was the step that
wrote a snapshot (docs/benchmarks.md). Sampling costs nothing measurable; ``tracemalloc`` in the
process would say which lines hold the memory, but it slows the scheduler several times over and
inflates the RSS it is meant to explain, so it is not used here.
"""

from __future__ import annotations

import runpy
import sys
import threading
import time
import traceback
from pathlib import Path

INTERVAL_S = 0.1
STEP_MIB = 8
FRAMES = 8


def rss_mib() -> int:
    """The resident set of this process (Linux /proc), 0 if unknown."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def where(thread_id: int) -> str:
    """The innermost frames of a thread, innermost first."""
    frame = sys._current_frames().get(thread_id)
    if frame is None:
        return "?"
    stack = traceback.extract_stack(frame)[-FRAMES:]
    return " < ".join(f"{Path(fs.filename).name}:{fs.name}:{fs.lineno}" for fs in reversed(stack))


def sample(out: Path, thread_id: int) -> None:
    start, last = time.monotonic(), 0
    with out.open("w", encoding="utf-8") as f:
        while True:
            time.sleep(INTERVAL_S)
            rss = rss_mib()
            if abs(rss - last) < STEP_MIB:
                continue
            last = rss
            f.write(f"{time.monotonic() - start:8.2f} s {rss:6d} MiB  {where(thread_id)}\n")
            f.flush()


def main(argv: list[str]) -> None:
    rest = argv[1:]
    if rest[:1] == ["-m"]:  # as the command line of ``python -m MODULE`` would have it
        rest = rest[1:]
    if len(argv) < 1 or not rest:
        sys.exit("usage: python -m bench.memtrace OUT [-m] MODULE [ARG ...]")
    out, module = Path(argv[0]), rest[0]
    out.parent.mkdir(parents=True, exist_ok=True)
    threading.Thread(target=sample, args=(out, threading.get_ident()), name="memtrace", daemon=True).start()
    sys.argv = [module, *rest[1:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
