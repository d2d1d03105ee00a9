"""Machine-readable contract for non-Python consumers: JSON Schema and AsyncAPI.

Generated from the msgspec Structs themselves, so the schema can never drift
from what the services write. ``kueuelog schema`` prints or writes them.
"""

from __future__ import annotations

from typing import Any

import msgspec

from events.envelope import SCHEMA_VERSION, Envelope, Topics
from events.messages import DecisionRecord


def _raw_schema(t: type) -> dict[str, Any]:
    """Types msgspec cannot describe: ``msgspec.Raw`` (a hand-over's partial scheduler state, JSON
    in the snapshot encoding, which consumers pass on unread)."""
    if t is msgspec.Raw:
        return {"type": "object", "description": "a partial scheduler state (the snapshot encoding), passed on as is"}
    raise NotImplementedError(f"no JSON Schema for {t!r}")


def json_schemas() -> dict[str, Any]:
    """One JSON Schema document per message kind, sharing a components section."""
    (envelope, decision), components = msgspec.json.schema_components(
        [Envelope, DecisionRecord], ref_template="#/$defs/{name}", schema_hook=_raw_schema
    )
    return {
        "cluster-event.schema.json": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "kueuelog cluster event (envelope)",
            "description": f"A record of the cluster-events topic, schema version {SCHEMA_VERSION}.",
            **envelope,
            "$defs": components,
        },
        "decision.schema.json": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "kueuelog decision",
            "description": "A record of the decisions topic: admit, evict, pending, or the end of a cycle.",
            **decision,
            "$defs": components,
        },
    }


def asyncapi(topics: Topics | None = None) -> dict[str, Any]:
    """An AsyncAPI 3.0 description of the topics, for integrators."""
    topics = topics or Topics()
    (envelope, decision), components = msgspec.json.schema_components(
        [Envelope, DecisionRecord], ref_template="#/components/schemas/{name}", schema_hook=_raw_schema
    )
    components = dict(components)
    components["ClusterEventRecord"] = envelope
    components["DecisionRecord"] = decision
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "kueuelog",
            "version": f"{SCHEMA_VERSION}.0.0",
            "description": (
                "Kueue-compatible quota admission as an event log. Watchers publish cluster events; one scheduler "
                "folds them and publishes decisions; actuators and any subscriber consume the decisions. "
                "Values are JSON; consumers of decisions should read with isolation level read_committed."
            ),
        },
        "defaultContentType": "application/json",
        "channels": {
            "clusterEvents": {
                "address": topics.cluster_events,
                "description": "Ordered input of the scheduler: every change in every cluster, clock ticks and "
                               "actuation outcomes. Key: <cluster>/<namespace>/<name> of the object.",
                "messages": {"clusterEvent": {"$ref": "#/components/messages/clusterEvent"}},
            },
            "decisions": {
                "address": topics.decisions,
                "description": "What each scheduling cycle decided. Key: <namespace>/<workload>, or 'cycle' for "
                               "the record closing a cycle. Decision ids are deterministic: deduplicate on them.",
                "messages": {"decision": {"$ref": "#/components/messages/decision"}},
            },
            "deadLetters": {
                "address": topics.dead_letters,
                "description": "Records the scheduler could not read, with the reason.",
            },
        },
        "operations": {
            "publishClusterEvent": {"action": "send", "channel": {"$ref": "#/channels/clusterEvents"}},
            "receiveDecision": {"action": "receive", "channel": {"$ref": "#/channels/decisions"}},
        },
        "components": {
            "messages": {
                "clusterEvent": {"name": "clusterEvent",
                                 "payload": {"$ref": "#/components/schemas/ClusterEventRecord"}},
                "decision": {"name": "decision", "payload": {"$ref": "#/components/schemas/DecisionRecord"}},
            },
            "schemas": components,
        },
    }
