"""ProvisioningRequests (``autoscaling.x-k8s.io/v1``) to ``ProvisioningRequestObserved`` events.

A request Kueue's way is named ``<workload>-<check>-<attempt>`` and owned by its Workload: the
owner gives the workload, the rest of the name the check and the attempt. Its conditions and
``provisioningClassDetails`` are what the scheduler maps to the check's state. A request that
is not a Workload's (another controller's) is not ours and says nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from events.cluster import KUEUE_GROUP
from events.codec import encode
from events.envelope import Envelope
from events.messages import ProvisioningRequestCondition, ProvisioningRequestObserved

if TYPE_CHECKING:
    from services.watcher.translate import EventType, Ref, Translation


def observed_body(ev: ProvisioningRequestObserved) -> bytes:
    """What makes an observation news: everything but its time."""
    return encode(msgspec.structs.replace(ev, time=0))


def _owner(meta: Mapping[str, Any]) -> str:
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("kind") == "Workload" and str(ref.get("apiVersion", "")).startswith(
                f"{KUEUE_GROUP}/"):
            return str(ref.get("name") or "")
    return ""


def _conditions(status: Mapping[str, Any]) -> tuple[ProvisioningRequestCondition, ...]:
    out = []
    for c in status.get("conditions") or []:
        if isinstance(c, Mapping) and isinstance(c.get("type"), str) and isinstance(c.get("status"), str):
            message = c.get("message")
            out.append(ProvisioningRequestCondition(type=c["type"], status=c["status"],
                                                    message=message if isinstance(message, str) else ""))
    return tuple(sorted(out, key=lambda c: c.type))


def translate_request(cluster: str, source: Ref, event_type: EventType, obj: Mapping[str, Any],
                      meta: Mapping[str, Any], rv: str, time_ms: int) -> Translation:
    from services.watcher.translate import SOURCE, Translation, envelope_id

    workload = _owner(meta)
    prefix = f"{workload}-"
    if event_type == "DELETED" or not workload or not source.name.startswith(prefix):
        return Translation(source, resource_version=rv)
    check, _, attempt = source.name[len(prefix):].rpartition("-")
    if not check or not attempt.isdigit():
        return Translation(source, errors=[f"cluster:{cluster}: {source}: metadata.name: not "
                                           f"<workload>-<check>-<attempt> for Workload {workload}"],
                           resource_version=rv)
    status = obj.get("status")
    status = status if isinstance(status, Mapping) else {}
    details = status.get("provisioningClassDetails")
    pairs = tuple(sorted((str(k), str(v)) for k, v in details.items())) if isinstance(details, Mapping) else ()
    event = ProvisioningRequestObserved(time=time_ms, namespace=source.namespace, name=source.name,
                                        workload=workload, check=check, attempt=int(attempt),
                                        conditions=_conditions(status), class_details=pairs)
    env = Envelope(id=envelope_id(cluster, source, rv, "observed"), source=SOURCE, cluster=cluster, event=event)
    return Translation(source, [env], resource_version=rv)
