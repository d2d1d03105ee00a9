"""``make bench``: every benchmark, figures printed for the README and issue notes."""

from __future__ import annotations

import sys

from bench import engine, replay, services


def main() -> int:
    for line in engine.main():
        print(line, flush=True)
    for line in replay.main():
        print(line, flush=True)
    for line in services.main():
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
