"""What ``kueuelog`` exits with, and the one line it prints, for every way a command can end.

| code | meaning | for example |
|---|---|---|
| 0 | success | |
| 1 | a check failed | ``replay --verify`` found a mismatch, ``log check`` found damage |
| 2 | bad input or usage | an invalid manifest, a file that cannot be read, an unknown flag |
| 3 | configuration | a bad ``KUEUELOG_*`` value or flag value, no usable kubeconfig, a port that cannot be served |
| 4 | the log is unavailable | not a kueuelog log, read-only for a writer, the broker refusing the credential |
| 5 | not the leader | another instance holds the role, took it over, or fenced this one |
| 6 | the log is newer than this version | an event type this version does not know: upgrade it |
| 70 | internal error | a bug; the traceback is written to a file named in the message |

A service never exits on a log error that may pass (a broker restarting, a full disk): it backs
off and says so on ``/readyz``. Only what cannot pass ends it, with one of the codes above.
"""

from __future__ import annotations

import sys
import tempfile
import traceback
from enum import IntEnum

from events.manifests import ManifestError
from services.runtime.log import LogError, Refused


class ExitCode(IntEnum):
    OK = 0
    CHECK_FAILED = 1
    BAD_INPUT = 2
    CONFIGURATION = 3
    LOG_UNAVAILABLE = 4
    NOT_LEADER = 5
    NEWER_LOG = 6
    INTERNAL = 70


class UsageError(Exception):
    """Flags that do not go together, or a flag value out of range: exit 2 with the message."""


class ConfigurationError(Exception):
    """A setting from the environment or a file (a ``KUEUELOG_*`` value, the kubeconfig, Kafka's
    settings) or a port that cannot be served: exit 3 with the message."""


def classify(e: BaseException) -> tuple[ExitCode, str]:
    """The exit code and the one line to print for an error that ended a command."""
    from services.scheduler.service import SchedulerStopped

    if isinstance(e, ConfigurationError):
        return ExitCode.CONFIGURATION, f"error: {e}"
    if isinstance(e, ManifestError | UsageError):
        return ExitCode.BAD_INPUT, f"error: {e}"
    if isinstance(e, OSError) and e.filename is not None:  # an input file the command was given
        return ExitCode.BAD_INPUT, f"error: cannot read {e.filename}: {e.strerror}"
    if isinstance(e, SchedulerStopped):
        return ExitCode.NEWER_LOG, f"error: the scheduler stopped: {e}"
    if isinstance(e, Refused):
        return ExitCode.NOT_LEADER, f"error: {e}"
    if isinstance(e, LogError):
        return ExitCode.LOG_UNAVAILABLE, f"error: {e}"
    return ExitCode.INTERNAL, _internal(e)


def _internal(e: BaseException) -> str:
    """A bug: one line on the terminal, the traceback in a file for the report."""
    text = "".join(traceback.format_exception(e))
    try:
        with tempfile.NamedTemporaryFile("w", prefix="kueuelog-crash-", suffix=".txt", delete=False) as f:
            f.write(text)
            where = f"the traceback is in {f.name}"
    except OSError:
        sys.stderr.write(text)
        where = "the traceback is above"
    return f"internal error: {type(e).__name__}: {e} (a bug in kueuelog; {where})"
