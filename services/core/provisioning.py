"""The ProvisioningRequest admission check, Kueue-exact, as pure functions.

Kueue's controller (``pkg/controller/admissionchecks/provisioning/``) does two things for each
workload holding quota and each of its ``kueue.x-k8s.io/provisioning-request`` checks:

- it creates a ProvisioningRequest ``<workload>-<check>-<attempt>`` (and one PodTemplate
  ``ppt-<request>-<podSet>`` per podSet that uses a managed resource) from the
  ProvisioningRequestConfig: class, parameters (the Job's ``provreq.kueue.x-k8s.io/*``
  annotations win), podSets merged by ``podSetMergePolicy``; with no managed resource
  requested, the check is Ready at once (``NoRequestNeeded``);
- it maps the request's conditions to the check's state (:func:`sync_state`).

In kueuelog the plan of each request travels in the ``AdmitWorkload`` decision (the actuator
creates it), the request's status comes back as a ``ProvisioningRequestObserved`` event, and
the scheduler folds it through :func:`sync_state`: one writer, and everything replays.
"""

from __future__ import annotations

import hashlib

import msgspec

from events import objects as o
from events.cluster import (
    PROVISIONING_ANNOTATION_PREFIX,
    PROVISIONING_CLASS_ANNOTATION,
    PROVISIONING_CONSUME_ANNOTATION,
)
from events.messages import ProvisioningRequestCondition

NAME_HASH_LENGTH = 5
NAME_MAX_PREFIX = 252 - NAME_HASH_LENGTH
POD_TEMPLATE_PREFIX = "ppt"
CHECK_INACTIVE = "the check is not active"
NO_REQUEST_NEEDED = "the provisioning request is not needed"
CONSUME_ANNOTATION = PROVISIONING_CONSUME_ANNOTATION
CLASS_ANNOTATION = PROVISIONING_CLASS_ANNOTATION


def limit_name(full: str) -> str:
    """Kueue's ``limitObjectName``: names past 252 characters are cut and get a SHA-1 suffix."""
    if len(full) <= NAME_MAX_PREFIX:
        return full
    digest = hashlib.sha1(full.encode(), usedforsecurity=False).hexdigest()
    return f"{full[:NAME_MAX_PREFIX]}-{digest[:NAME_HASH_LENGTH]}"


def request_name(workload: str, check: str, attempt: int) -> str:
    return limit_name(f"{workload}-{check}-{attempt}")


def pod_template_name(request: str, pod_set: str) -> str:
    return limit_name(f"{POD_TEMPLATE_PREFIX}-{request}-{pod_set}")


def _uses(ps: o.PodSet, managed: tuple[str, ...]) -> bool:
    return not managed or any(r in managed for r, _ in ps.requests)


def required_pod_sets(wl: o.Workload, adm: o.Admission, prc: o.ProvisioningRequestConfig) -> list[tuple[o.PodSet, int]]:
    """(podSet, assigned count) of each podSet that needs capacity (Kueue's ``reqIsNeeded``)."""
    counts = {psa.name: psa.count for psa in adm.pod_set_assignments}
    return [(ps, counts.get(ps.name, ps.count)) for ps in wl.pod_sets
            if ps.count > 0 and _uses(ps, prc.managed_resources) and counts.get(ps.name, ps.count) > 0]


def parameters(wl: o.Workload, prc: o.ProvisioningRequestConfig) -> tuple[tuple[str, str], ...]:
    """The config's parameters with the Job's ``provreq.kueue.x-k8s.io/<name>`` annotations over
    them (Kueue's ``passProvReqParams``: the annotation wins)."""
    out = dict(prc.parameters)
    for key, value in wl.annotations:
        if key.startswith(PROVISIONING_ANNOTATION_PREFIX):
            out[key[len(PROVISIONING_ANNOTATION_PREFIX):]] = value
    return tuple(sorted(out.items()))


def _similar(a: o.PodSet, b: o.PodSet) -> bool:
    return (a.requests, a.node_selector, a.affinity_terms, a.tolerations) == (
        b.requests, b.node_selector, b.affinity_terms, b.tolerations)


def plan(wl: o.Workload, adm: o.Admission, check: str, attempt: int,
         prc: o.ProvisioningRequestConfig) -> o.ProvisioningRequestPlan | None:
    """The request to create; None when no podSet needs capacity (the check is Ready at once)."""
    needed = required_pod_sets(wl, adm, prc)
    if not needed:
        return None
    name = request_name(wl.name, check, attempt)
    merged: list[tuple[o.PodSet, int]] = []
    for ps, count in needed:
        if prc.pod_set_merge_policy:
            i = next((i for i, (m, _) in enumerate(merged) if _similar(m, ps)), None)
            if i is not None:
                merged[i] = (merged[i][0], merged[i][1] + count)
                continue
        merged.append((ps, count))
    return o.ProvisioningRequestPlan(
        name=name, check=check, attempt=attempt, provisioning_class_name=prc.provisioning_class_name,
        parameters=parameters(wl, prc),
        pod_sets=tuple(o.ProvisioningRequestPodSet(pod_set=ps.name, pod_template=pod_template_name(name, ps.name),
                                                   count=count) for ps, count in merged),
    )


def backoff_seconds(base_seconds: int, max_seconds: int, n: int) -> int:
    """Kueue's ``UpdateAdmissionCheckRequeueState``: ``min(base * 2^(n-1), max)`` in whole seconds
    for the ``n``-th retry (n >= 1). Kueue adds a jitter of at most 0.01 %, which the truncation
    to whole seconds removes whenever ``base * 2^(n-1)`` is under 10,000 s; kueuelog drops it
    (decisions are a function of the log). A max of 0 is no cap (``cmp.Or`` in ``NewBackoff``)."""
    n = max(n, 1)
    wait = base_seconds * (1 << min(n - 1, 62))
    return max(0, wait if max_seconds <= 0 else min(wait, max_seconds))


def _find(conds: tuple[ProvisioningRequestCondition, ...], type_: str) -> ProvisioningRequestCondition | None:
    return next((c for c in conds if c.type == type_), None)


def _true(conds: tuple[ProvisioningRequestCondition, ...], type_: str) -> ProvisioningRequestCondition | None:
    c = _find(conds, type_)
    return c if c is not None and c.status == "True" else None


def _replace(cur: o.AdmissionCheckState, **changes: object) -> o.AdmissionCheckState:
    return msgspec.structs.replace(cur, **changes)


def _retry_or_reject(cur: o.AdmissionCheckState, prc: o.ProvisioningRequestConfig, attempt: int,
                     prefix: str, message: str) -> o.AdmissionCheckState:
    if attempt <= prc.backoff_limit_count:
        out = _replace(cur, message=f"{prefix}{message}")
        if attempt > cur.retry_count:  # not an old request's failure again
            wait = backoff_seconds(prc.backoff_base_seconds, prc.backoff_max_seconds, cur.retry_count + 1)
            out = _replace(out, state=o.CheckState.RETRY, requeue_after_seconds=wait)
        return out
    return _replace(cur, state=o.CheckState.REJECTED, message=message)


def ready_updates(wl: o.Workload, request: str, pod_sets: tuple[str, ...], prc: o.ProvisioningRequestConfig,
                  details: tuple[tuple[str, str], ...]) -> tuple[o.PodSetUpdate, ...]:
    """Kueue's ``podSetUpdates`` for a provisioned request: the consume annotations, and the
    config's nodeSelector keys with values from ``provisioningClassDetails`` (missing ones skipped)."""
    detail = dict(details)
    selector = tuple(sorted((key, detail[src]) for key, src in prc.node_selector_updates if src in detail))
    return tuple(o.PodSetUpdate(
        name=ps, annotations=tuple(sorted(((CONSUME_ANNOTATION, request),
                                           (CLASS_ANNOTATION, prc.provisioning_class_name)))),
        node_selector=selector,
    ) for ps in pod_sets)


def sync_state(cur: o.AdmissionCheckState, prc: o.ProvisioningRequestConfig, request: str, attempt: int,
               conds: tuple[ProvisioningRequestCondition, ...], details: tuple[tuple[str, str], ...],
               *, wl: o.Workload, pod_sets: tuple[str, ...], admitted: bool) -> o.AdmissionCheckState:
    """The check's state from its request's conditions (Kueue's ``syncCheckStates``)."""
    failed = _true(conds, "Failed")
    if failed is not None:
        return _retry_or_reject(cur, prc, attempt, "Retrying after failure: ", failed.message)
    revoked = _true(conds, "CapacityRevoked")
    if revoked is not None:
        return _replace(cur, state=o.CheckState.REJECTED, message=revoked.message)
    expired = _true(conds, "BookingExpired")
    if expired is not None:
        if admitted:
            return cur
        return _retry_or_reject(cur, prc, attempt, "Retrying after booking expired: ", expired.message)
    provisioned = _true(conds, "Provisioned")
    if provisioned is not None:
        if cur.state == o.CheckState.READY:
            return cur
        return _replace(cur, state=o.CheckState.READY, message=provisioned.message,
                        pod_set_updates=ready_updates(wl, request, pod_sets, prc, details))
    if _true(conds, "Accepted") is not None:
        eta = _find(conds, "Provisioned")
        if eta is None:
            return cur
        return _replace(cur, state=o.CheckState.PENDING, message=eta.message)
    return _replace(cur, state=o.CheckState.PENDING, message="")
