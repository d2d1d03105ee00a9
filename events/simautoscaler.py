"""The simulated cluster autoscaler: how a provisioning class answers a ProvisioningRequest.

A behaviour per ``provisioningClassName`` (``--provisioning CLASS=BEHAVIOUR``, repeatable):

| behaviour | what the simulated autoscaler does |
|---|---|
| ``succeed`` / ``succeed:DURATION`` | Accepted at once (with an ETA), Provisioned after DURATION (default 0s) |
| ``fail:K`` / ``fail:K:DURATION`` | attempts 1..K fail after DURATION; attempt K+1 on succeeds after DURATION |
| ``never`` | Accepted, never provisioned |
| ``revoke:DURATION`` | Provisioned after DURATION, capacity revoked after DURATION more |

A class without a behaviour is ``succeed``. Pure: :func:`answers` turns a request into the
status updates to report and when (milliseconds after its creation).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from events import validation as v
from events.messages import ProvisioningRequestCondition as Cond
from events.messages import ProvisioningRequestObserved
from events.objects import ProvisioningRequestPlan

KINDS = ("succeed", "fail", "never", "revoke")


@dataclass(frozen=True, slots=True)
class Behaviour:
    kind: str = "succeed"
    after_ms: int = 0
    failures: int = 0


class BehaviourError(ValueError):
    pass


def _duration(text: str, spec: str) -> int:
    try:
        return v.duration_ns(text) // 1_000_000
    except v.Invalid as e:
        raise BehaviourError(f"--provisioning {spec}: {e.message}") from None


def parse(spec: str) -> tuple[str, Behaviour]:
    """``CLASS=BEHAVIOUR`` -> (class, behaviour); a clear error for anything else."""
    cls, sep, text = spec.partition("=")
    if not sep or not cls:
        raise BehaviourError(f"--provisioning {spec!r}: expected CLASS=BEHAVIOUR, e.g. "
                             "check-capacity.autoscaling.x-k8s.io=succeed:1s")
    kind, _, rest = text.partition(":")
    if kind not in KINDS:
        raise BehaviourError(f"--provisioning {spec!r}: behaviour must be one of {', '.join(KINDS)} (got {kind!r})")
    if kind == "succeed":
        return cls, Behaviour("succeed", _duration(rest, spec) if rest else 0)
    if kind == "never":
        if rest:
            raise BehaviourError(f"--provisioning {spec!r}: never takes no argument")
        return cls, Behaviour("never")
    if kind == "revoke":
        if not rest:
            raise BehaviourError(f"--provisioning {spec!r}: revoke needs a DURATION, e.g. revoke:30s")
        return cls, Behaviour("revoke", _duration(rest, spec))
    count, _, after = rest.partition(":")
    if not count.isdigit():
        raise BehaviourError(f"--provisioning {spec!r}: fail needs a count of failures, e.g. fail:2 or fail:2:5s")
    return cls, Behaviour("fail", _duration(after, spec) if after else 0, int(count))


def parse_all(specs: Sequence[str]) -> dict[str, Behaviour]:
    out: dict[str, Behaviour] = {}
    for spec in specs:
        cls, b = parse(spec)
        out[cls] = b
    return out


def _eta(after_ms: int) -> str:
    return f"Provisioning Request ETA: {after_ms // 1000}s"


def answers(plan: ProvisioningRequestPlan, namespace: str, workload: str,
            behaviours: Mapping[str, Behaviour]) -> list[tuple[int, ProvisioningRequestObserved]]:
    """(milliseconds after creation, status to report) for one request, in time order."""
    b = behaviours.get(plan.provisioning_class_name, Behaviour())

    def at(delay: int, *conds: Cond,
           details: tuple[tuple[str, str], ...] = ()) -> tuple[int, ProvisioningRequestObserved]:
        return delay, ProvisioningRequestObserved(
            namespace=namespace, name=plan.name, workload=workload, check=plan.check, attempt=plan.attempt,
            conditions=conds, class_details=details)

    accepted = Cond(type="Accepted", status="True", message="ProvisioningRequest accepted")
    waiting = Cond(type="Provisioned", status="False", message=_eta(b.after_ms))
    provisioned = Cond(type="Provisioned", status="True", message="Provisioned by the simulated autoscaler")
    details = (("RequestKey", plan.name),)
    if b.kind == "never":
        return [at(0, accepted, Cond(type="Provisioned", status="False", message="Capacity is not available"))]
    if b.kind == "fail" and plan.attempt <= b.failures:
        failed = Cond(type="Failed", status="True", message=f"Simulated failure of attempt {plan.attempt}")
        return [at(0, accepted, waiting), at(b.after_ms, accepted, failed)]
    out = [at(0, accepted, waiting), at(b.after_ms, accepted, provisioned, details=details)]
    if b.kind == "revoke":
        revoked = Cond(type="CapacityRevoked", status="True", message="Capacity revoked by the simulated autoscaler")
        out.append(at(2 * b.after_ms, accepted, provisioned, revoked, details=details))
    return out
