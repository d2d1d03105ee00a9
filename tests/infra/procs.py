"""Child processes that do not outlive the process that started them.

atexit and ``finally`` cover normal exits and exceptions, not SIGKILL of the Python process (a CI
time-out, a killed bench); without the kernel's help an aborted run leaves brokers, API servers and
service processes behind, holding ports and CPU.
"""

from __future__ import annotations

import ctypes
import signal
import threading
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: signal.Signals = signal.SIGTERM) -> Callable[[], None] | None:
    """A pre-exec hook (``subprocess.Popen(preexec_fn=...)``) that has the kernel send ``sig`` to the
    child when this thread dies; None where it cannot work (then atexit alone has to do).

    PDEATHSIG fires when the *thread* that forked exits, so the hook is only given from the main
    thread, which lives as long as the children should. libc is resolved here, in the parent, so the
    forked child makes one foreign call and takes no loader locks."""
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux/glibc
        return None

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)

    return hook
