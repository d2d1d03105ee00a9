"""Workload conditions as Kueue writes them (types, reasons and message texts)."""

from __future__ import annotations

from events.messages import Condition


def _c(type_: str, status: bool, reason: str, message: str, at: int) -> Condition:
    return Condition(type=type_, status="True" if status else "False", reason=reason, message=message,
                     last_transition_time=at)


def quota_reserved(cluster_queue: str, at: int) -> Condition:
    return _c("QuotaReserved", True, "QuotaReserved", f"Quota reserved in ClusterQueue {cluster_queue}", at)


def admitted(at: int) -> Condition:
    return _c("Admitted", True, "Admitted", "The workload is admitted", at)


def pending(message: str, at: int) -> Condition:
    return _c("QuotaReserved", False, "Pending", message, at)


def inadmissible(message: str, at: int) -> Condition:
    return _c("QuotaReserved", False, "Inadmissible", message, at)


def evicted(reason: str, message: str, at: int) -> Condition:
    return _c("Evicted", True, reason, message, at)


def preempted(reason: str, message: str, at: int) -> Condition:
    return _c("Preempted", True, reason, message, at)


def not_admitted(at: int) -> Condition:
    return _c("Admitted", False, "NoReservation", "The workload has no reservation", at)


def requeued(status: bool, reason: str, message: str, at: int) -> Condition:
    """After an eviction Kueue copies the Evicted reason and message into Requeued."""
    return _c("Requeued", status, reason or "Requeued", message or "The workload was requeued after eviction", at)


def restarted(kind: str, at: int) -> Condition:
    return _c("Requeued", True, f"{kind}Restarted", f"The {kind} was restarted after being stopped", at)


def finished(succeeded: bool, message: str, at: int) -> Condition:
    if succeeded:
        return _c("Finished", True, "Succeeded", message or "Job finished successfully", at)
    return _c("Finished", True, "Failed", message or "Job failed", at)


def pending_admission_checks(at: int) -> Condition:
    return _c("Admitted", False, "UnsatisfiedChecks", "The workload has not all admission checks ready", at)


def pods_ready(at: int) -> Condition:
    return _c("PodsReady", True, "PodsReady", "All pods reached readiness and the workload is running", at)
