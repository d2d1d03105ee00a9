"""What ``explain`` says about admission checks: each check's history in the log (a request
planned, the autoscaler's answers, the controller's reports), and the checks' state now."""

from __future__ import annotations

from events.manifests import format_time
from events.messages import (
    AdmissionCheckUpdated,
    AdmitChecked,
    AdmitWorkload,
    EvictWorkload,
    ProvisioningRequestObserved,
)
from services.core.records import WorkloadRecord


def event_key(ev: object) -> str | None:
    """The workload an admission-check event is about (``ns/name``), or None for other events."""
    if isinstance(ev, ProvisioningRequestObserved):
        return f"{ev.namespace}/{ev.workload}"
    if isinstance(ev, AdmissionCheckUpdated):
        return f"{ev.namespace}/{ev.name}"
    return None


def event_text(ev: ProvisioningRequestObserved | AdmissionCheckUpdated) -> str:
    if isinstance(ev, AdmissionCheckUpdated):
        c = ev.check
        extra = f" (retry {c.retry_count}, back-off {c.requeue_after_seconds} s)" if c.requeue_after_seconds else ""
        return f"admission check {c.name} reported {c.state}{extra}" + (f": {c.message}" if c.message else "")
    conds = ", ".join(f"{c.type}" + ("" if c.status == "True" else f"={c.status}") + (f" ({c.message})" if c.message
                                                                                     else "")
                      for c in ev.conditions) or "no conditions yet"
    return f"ProvisioningRequest {ev.name} (check {ev.check}, attempt {ev.attempt}): {conds}"


def decision_text(d: AdmitWorkload | AdmitChecked, flavors: str) -> str:
    if isinstance(d, AdmitChecked):
        if d.failed_to_start:
            return f"every admission check Ready, but the Job fails to start: {d.failed_to_start}"
        updates = "; ".join(f"{u.name}: " + ", ".join(f"{k}={v}" for k, v in (*u.node_selector, *u.labels))
                            for u in d.pod_set_updates if u.node_selector or u.labels)
        return "admitted: every admission check is Ready" + (f" (podSetUpdates {updates})" if updates else "")
    checks = ", ".join(d.admission_checks or ())
    out = f"quota reserved in ClusterQueue {d.cluster_queue} ({flavors}); waiting for admission checks {checks}"
    for p in d.provisioning_requests or ():
        out += f"; ProvisioningRequest {p.name} created (check {p.check}, attempt {p.attempt}, " \
               f"class {p.provisioning_class_name})"
    return out


def eviction_suffix(d: EvictWorkload) -> str:
    """A Retry's count and back-off, as the eviction left the checks (Kueue's retryCount and
    requeueAfterSeconds)."""
    parts = [f"{c.name}: retry {c.retry_count}, back-off {c.requeue_after_seconds} s"
             for c in d.admission_checks or () if c.requeue_after_seconds is not None and c.retry_count]
    return f" ({'; '.join(parts)})" if parts and d.reason == "AdmissionCheck" else ""


def status_lines(rec: WorkloadRecord) -> list[str]:
    out = []
    for name in sorted(rec.checks):
        c = rec.checks[name]
        line = f"  admission check {name}: {c.state} since {format_time(c.last_transition_time)}"
        if c.retry_count:
            line += f", retry {c.retry_count}"
        if c.requeue_after_seconds is not None:
            line += f", back-off {c.requeue_after_seconds} s"
        out.append(line + (f": {c.message}" if c.message else ""))
    if rec.requeue_at is not None:
        out.append(f"  requeued at {format_time(rec.requeue_at)}, when its back-off ends")
    if rec.deactivated:
        out.append("  deactivated by a Rejected admission check")
    return out
