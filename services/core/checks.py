"""Two-phase admission: a Workload's admission checks, from quota reservation to Admitted.

Kueue admits in two phases (``pkg/workload/admissionchecks.go``, the check parts of
``pkg/controller/core/workload_controller.go`` and ``pkg/workload/evict/evict.go``):

1. The scheduler reserves quota. The ClusterQueue's checks that apply to the assigned flavors
   (``admissionChecksStrategy`` with ``onFlavors``) are added to the Workload as ``Pending``;
   ``Admitted=False`` (``UnsatisfiedAdmissionChecks``) until every one is ``Ready``.
2. Each check's controller reports the check's state (here: an ``AdmissionCheckUpdated`` event,
   folded by :func:`fold_update`). The next cycle settles what changed (:func:`settle`):
   all Ready -> ``AdmitChecked`` (Admitted=True, podSetUpdates merged with the flavors' node
   labels); a Retry -> eviction with reason ``AdmissionCheck``, its quota released, and the
   workload requeued once the longest ``requeueAfterSeconds`` has passed (``requeue_at``, released with
   the PodsReady back-offs by ``services.core.podsready.release``);
   a Rejected -> the workload is deactivated (``services.core.deactivation``: eviction
   ``DeactivatedDueToAdmissionCheck``) and never requeued.

Time comes from the log (``state.now``), so every step replays. Pure: no clock, no I/O.
"""

from __future__ import annotations

import msgspec

from events import conditions as cond
from events import objects as o
from events.cluster import KUEUE_GROUP, PROVISIONING_CONTROLLER, ConditionType, EvictionReason
from events.messages import AdmissionCheckUpdated, ProvisioningRequestObserved
from events.multikueue_manifest import MULTIKUEUE_CONTROLLER
from services.core import provisioning
from services.core.state import State, WorkloadRecord, note_anomaly

PROVISIONING_CONFIG_KIND = "ProvisioningRequestConfig"
FAILED_CHECKS = "The workload has failed admission checks"
RESET_PREFIX = "Reset to Pending after eviction. Previously: "


# --- which checks, and are they usable --------------------------------------------------------


def check_is_active(state: State, name: str) -> bool:
    """An AdmissionCheck is active when its status says so; without a stated status, a
    provisioning check is active when its ProvisioningRequestConfig exists (Kueue's provisioning
    admission-check reconciler) and a check of another controller is taken as active (kueuelog
    cannot see whether that controller runs)."""
    ac = state.admission_checks.get(name)
    if ac is None:
        return False
    if ac.active is not None:
        return ac.active
    if ac.controller_name == PROVISIONING_CONTROLLER:
        return provisioning_config(state, name) is not None
    if ac.controller_name == MULTIKUEUE_CONTROLLER:  # Kueue: active once its MultiKueueConfig exists
        return ac.parameters_name in state.multikueue.configs
    return True


def provisioning_config(state: State, check: str) -> o.ProvisioningRequestConfig | None:
    ac = state.admission_checks.get(check)
    if ac is None or ac.parameters_kind != PROVISIONING_CONFIG_KIND:
        return None
    if ac.parameters_api_group not in ("", KUEUE_GROUP):
        return None
    return state.provisioning_configs.get(ac.parameters_name)


def inactive_checks(state: State, cq: o.ClusterQueue) -> tuple[list[str], list[str]]:
    """(missing, inactive) AdmissionChecks a ClusterQueue references, each sorted."""
    names = sorted(set(cq.admission_checks))
    missing = [c for c in names if c not in state.admission_checks]
    inactive = [c for c in names if c in state.admission_checks and not check_is_active(state, c)]
    return missing, inactive


def checks_for(cq: o.ClusterQueue, adm: o.Admission) -> tuple[str, ...]:
    """The ClusterQueue's checks that apply to an admission: a rule with ``onFlavors`` applies
    when one of them is assigned (Kueue's ``AdmissionChecksForWorkload``), sorted by name."""
    rules = dict(cq.admission_check_flavors)
    assigned = {flavor for psa in adm.pod_set_assignments for _, flavor in psa.flavors}
    out = {c for c in cq.admission_checks if not rules.get(c) or any(f in assigned for f in rules[c])}
    return tuple(sorted(out))


def has_failed_checks(rec: WorkloadRecord) -> bool:
    """A Retry or Rejected check: Kueue's scheduler does not nominate such a workload."""
    return any(c.state in (o.CheckState.RETRY, o.CheckState.REJECTED) for c in rec.checks.values())


# --- phase 1: quota reserved -------------------------------------------------------------------


def start_checks(state: State, rec: WorkloadRecord, adm: o.Admission) -> tuple[str, ...]:
    """Quota reserved: the applicable checks are on the workload, new ones Pending (Kueue's
    ``syncAdmissionCheckConditions``: existing states stay, checks that no longer apply go)."""
    cq = state.cluster_queues.get(adm.cluster_queue)
    if (cq is None or not cq.admission_checks) and not rec.checks:
        return ()  # the common case, and nothing to carry over
    names = checks_for(cq, adm) if cq is not None else ()
    old = rec.checks
    rec.checks = {n: _provisioning_start(state, rec, adm, old.get(n) or o.AdmissionCheckState(
        name=n, last_transition_time=state.now)) for n in names}
    if any(_news_at_start(c) for c in rec.checks.values()):
        # Ready already (given in the input; not needed): settle admits it, or tells the states
        # (services.core.workload_status) beyond the plain Pending the reservation writes.
        state.checks_changed[rec.key] = None
    return names


def _news_at_start(c: o.AdmissionCheckState) -> bool:
    # (A check reset by an eviction already shows its reset message: the reservation keeps it.)
    return c.state != o.CheckState.PENDING or bool(c.pod_set_updates) or bool(
        c.message and not c.message.startswith(RESET_PREFIX))


def _is_provisioning(state: State, name: str) -> bool:
    ac = state.admission_checks.get(name)
    return ac is not None and ac.controller_name == PROVISIONING_CONTROLLER


def _provisioning_start(state: State, rec: WorkloadRecord, adm: o.Admission,
                        cur: o.AdmissionCheckState) -> o.AdmissionCheckState:
    """What Kueue's provisioning controller sets before any request exists: Pending "the check
    is not active" without a config, Ready "not needed" when no podSet uses a managed resource."""
    if not _is_provisioning(state, cur.name) or cur.state != o.CheckState.PENDING:
        return cur
    prc = provisioning_config(state, cur.name)
    if prc is None:
        return _set(cur, o.CheckState.PENDING, provisioning.CHECK_INACTIVE, state.now)
    if provisioning.plan(rec.obj, adm, cur.name, cur.retry_count + 1, prc) is None:
        out = _set(cur, o.CheckState.READY, provisioning.NO_REQUEST_NEEDED, state.now)
        return msgspec.structs.replace(out, pod_set_updates=())
    return cur


def _set(cur: o.AdmissionCheckState, st: o.CheckState, message: str, now: int) -> o.AdmissionCheckState:
    at = cur.last_transition_time if cur.state == st else now
    return msgspec.structs.replace(cur, state=st, message=message, last_transition_time=at)


def plans_for(state: State, rec: WorkloadRecord, *, pending_only: bool = True) -> tuple[o.ProvisioningRequestPlan, ...]:
    """The ProvisioningRequests a reservation needs: one per Pending provisioning check, attempt
    ``retryCount + 1``; with ``pending_only`` False, those of the current attempt whatever the
    check's state (what an eviction deletes)."""
    adm = rec.admission
    if adm is None:
        return ()
    out = []
    for name in sorted(rec.checks):
        c = rec.checks[name]
        prc = provisioning_config(state, name) if _is_provisioning(state, name) else None
        if prc is None or (pending_only and c.state != o.CheckState.PENDING):
            continue
        p = provisioning.plan(rec.obj, adm, name, c.retry_count + 1, prc)
        if p is not None:
            out.append(p)
    return tuple(out)


def fold_observed(state: State, ev: ProvisioningRequestObserved) -> None:
    """A ProvisioningRequest's status: mapped to its check as Kueue's controller maps it. A request
    of an earlier attempt, or for a check the workload does not wait for, changes nothing."""
    key = f"{ev.namespace}/{ev.workload}"
    rec = state.workloads.get(key)
    cur = rec.checks.get(ev.check) if rec is not None else None
    prc = provisioning_config(state, ev.check)
    if rec is None or cur is None or rec.admission is None or rec.finished or prc is None:
        note_anomaly(state, f"ProvisioningRequest {ev.namespace}/{ev.name} for a check {key} does not wait for")
        return
    if ev.attempt != cur.retry_count + 1:
        return  # an earlier attempt's request (Kueue syncs the active or last one only)
    p = provisioning.plan(rec.obj, rec.admission, ev.check, ev.attempt, prc)
    pod_sets = tuple(ps.pod_set for ps in p.pod_sets) if p is not None else ()
    admitted = cond.is_true(rec.conditions.get(ConditionType.ADMITTED))
    new = provisioning.sync_state(cur, prc, ev.name, ev.attempt, ev.conditions, ev.class_details,
                                  wl=rec.obj, pod_sets=pod_sets, admitted=admitted)
    if new == cur:
        return
    rec.checks[ev.check] = msgspec.structs.replace(
        new, last_transition_time=cur.last_transition_time if new.state == cur.state else state.now)
    state.checks_changed[key] = None


def all_ready(rec: WorkloadRecord) -> bool:
    return all(c.state == o.CheckState.READY for c in rec.checks.values())


# --- phase 2: a controller reports -------------------------------------------------------------


def fold_update(state: State, ev: AdmissionCheckUpdated) -> None:
    key = f"{ev.namespace}/{ev.name}"
    rec = state.workloads.get(key)
    name = ev.check.name
    if rec is None or rec.finished:
        note_anomaly(state, f"admission check {name} update for unknown or finished Workload {key}")
        return
    old = rec.checks.get(name)
    if old is None or rec.admission is None:
        note_anomaly(state, f"admission check {name} update for Workload {key}, which does not wait for it")
        return
    new = ev.check
    # Kueue's SetAdmissionCheckState: the transition time moves only with the state.
    at = old.last_transition_time if old.state == new.state else (new.last_transition_time or state.now)
    new = msgspec.structs.replace(new, last_transition_time=at)
    if new == old:
        return  # the same report again: nothing to settle, nothing to tell
    rec.checks[name] = new
    state.checks_changed[key] = None


# --- what a cycle concludes --------------------------------------------------------------------


def _listed(checks: list[o.AdmissionCheckState], state: o.CheckState) -> str:
    """Kueue's ``buildAdmissionChecksMessage``."""
    parts = [f'"{c.name}" ({c.message})' if c.message else f'"{c.name}"' for c in sorted(checks, key=lambda c: c.name)]
    noun = "AdmissionChecks" if len(checks) > 1 else "AdmissionCheck"
    return f"{noun} in {state} state: {'; '.join(parts)}"


def verdict(rec: WorkloadRecord) -> tuple[str, EvictionReason | None, str]:
    """What the workload's checks call for now: ("admit" | "evict" | "reject" | "", reason, message)."""
    if rec.admission is None or rec.evicting or rec.finished or not rec.checks:
        return "", None, ""
    states = sorted(rec.checks.values(), key=lambda c: c.name)
    rejected = [c for c in states if c.state == o.CheckState.REJECTED]
    if rejected:
        # Kueue sets the DeactivationTarget with this message; the eviction that follows says
        # "The workload is deactivated due to <it>" (reason DeactivatedDueToAdmissionCheck).
        return ("reject", EvictionReason.DEACTIVATED,
                f"The workload is deactivated due to {_listed(rejected, o.CheckState.REJECTED)}")
    retry = [c for c in states if c.state == o.CheckState.RETRY]
    if retry:
        return "evict", EvictionReason.ADMISSION_CHECK, f"Evicted due to {_listed(retry, o.CheckState.RETRY)}"
    if all_ready(rec) and not cond.is_true(rec.conditions.get(ConditionType.ADMITTED)):
        return "admit", None, ""
    return "", None, ""


def pod_set_updates(rec: WorkloadRecord) -> tuple[o.PodSetUpdate, ...]:
    """Every Ready check's podSetUpdates, checks in name order."""
    return tuple(u for c in sorted(rec.checks.values(), key=lambda c: c.name) for u in c.pod_set_updates)


def update_conflict(state: State, rec: WorkloadRecord, updates: tuple[o.PodSetUpdate, ...]) -> str:
    """Kueue merges each podSetUpdate into what the podSet gets (its flavors' node labels, the
    template's nodeSelector) and refuses a key with two values (``podset.Merge``): the Job then
    fails to start. The conflict, as Kueue words it, or ""."""
    adm = rec.admission
    if adm is None:
        return ""
    pod_sets = {ps.name: ps for ps in rec.obj.pod_sets}
    for psa in adm.pod_set_assignments:
        selector: dict[str, str] = dict(pod_sets[psa.name].node_selector) if psa.name in pod_sets else {}
        for flavor_name in sorted({f for _, f in psa.flavors}):
            flavor = state.flavors.get(flavor_name)
            if flavor is not None:
                selector.update(flavor.node_labels)
        for u in updates:
            if u.name != psa.name:
                continue
            for k, v in u.node_selector:
                if k in selector and selector[k] != v:
                    return (f"invalid admission check PodSetUpdate: conflict for nodeSelector: conflict for "
                            f"key={k}, value1={selector[k]}, value2={v}")
                selector[k] = v
    return ""


def finish_admission(state: State, rec: WorkloadRecord) -> None:
    """Every check Ready: Admitted=True (Kueue's ``SyncAdmittedCondition``)."""
    rec.set_condition(cond.admitted(state.now))


def note_eviction(state: State, rec: WorkloadRecord, reason: EvictionReason) -> None:
    """An eviction was decided: Kueue resets the checks to Pending at once
    (``resetChecksOnEviction``), counting a Retry in ``retryCount``; the longest Retry back-off
    holds the workload after its quota is released. (A Rejected check's eviction deactivates it:
    ``services.core.deactivation``, through the decision's ``deactivate``.)"""
    hold_until = 0
    for name in sorted(rec.checks):
        c = rec.checks[name]
        if c.state == o.CheckState.PENDING:
            continue
        retry = c.state == o.CheckState.RETRY
        if retry and c.requeue_after_seconds is not None:
            hold_until = max(hold_until, c.last_transition_time + c.requeue_after_seconds * 1000)
        rec.checks[name] = o.AdmissionCheckState(
            name=name, message=RESET_PREFIX + c.state, last_transition_time=state.now,
            requeue_after_seconds=c.requeue_after_seconds, retry_count=c.retry_count + (1 if retry else 0),
        )
    if reason == EvictionReason.ADMISSION_CHECK and hold_until > state.now:
        rec.requeue_at = hold_until
