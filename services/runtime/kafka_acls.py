"""What each role may do on Kafka: the least-privilege ACLs, derived from the names the code uses.

Every service runs with a credential of its own role, so a compromised watcher cannot write
decisions and a subscriber cannot write anything. The table below is the one source: the
Strimzi manifest (``deploy/strimzi/kafka.yaml``) is checked against it by a unit test, and
an integration test grants exactly these ACLs on a real broker and runs the services with
the role credentials.

Why each role needs what it has:

- **watcher**: appends cluster events (and dead letters for objects it cannot translate) with
  an idempotent producer, and reads cluster events back to rebuild its memory after a restart;
  with a shard map it records the map on ``P.shard-map`` (``services.runtime.shards``).
- **scheduler**: reads cluster events; writes decisions, snapshots and dead letters in
  transactions (transactional id ``P.scheduler.<shard>``) together with its input position
  (group ``P.scheduler``); elects a leader in group ``P.scheduler.<shard>`` on the leases topic;
  appends a clock tick to cluster events when one of its deadlines comes (waitForPodsReady's
  timeouts and back-off, ``services.scheduler.deadlines``).
- **actuator**: reads decisions; writes its reports to cluster events and, for the simulated
  cluster, commands to the sim-cluster topic, in transactions with its position (group and
  transactional id ``P.actuator``...); elects a leader like the scheduler.
- **simcluster** (the simulated cluster, for demos and benchmarks): reads and writes its own
  topic and cluster events (reports, and seeded manifests); reads the positions of the
  scheduler and the actuator to know when the system is idle (a group's position on a topic
  is only told to whoever may describe the topic, and "at the end" means reading past it).
- **reader** (replay, explain, tail, your subscribers): reads every topic, writes nothing.

Topics are created by the platform (Strimzi's topic operator) or by a super user: no role
has ``Create``. A service whose topic does not exist yet waits for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from events.envelope import Topics
from events.simcluster import sim_cluster_topic
from services.runtime.kafka import LEASES_SUFFIX
from services.runtime.shards import hand_over_topic, held_topic, shard_map_topic

ROLES: Final = ("watcher", "scheduler", "actuator", "simcluster", "reader")


class Resource(StrEnum):
    TOPIC = "topic"
    GROUP = "group"
    TRANSACTIONAL_ID = "transactionalId"
    CLUSTER = "cluster"


class Pattern(StrEnum):
    LITERAL = "literal"
    PREFIX = "prefix"


class Op(StrEnum):
    DESCRIBE = "Describe"
    READ = "Read"
    WRITE = "Write"
    IDEMPOTENT_WRITE = "IdempotentWrite"


@dataclass(frozen=True, order=True)
class Acl:
    """Allow ``operations`` on one resource (the cluster resource has no name)."""

    resource: Resource
    name: str
    pattern: Pattern
    operations: tuple[Op, ...]


def _topic(name: str, *ops: Op, pattern: Pattern = Pattern.LITERAL) -> Acl:
    return Acl(Resource.TOPIC, name, pattern, (Op.DESCRIBE, *ops))


def _writer(prefix: str, role: str) -> list[Acl]:
    """A single writer's group (positions and election) and transactional id."""
    return [Acl(Resource.GROUP, f"{prefix}.{role}", Pattern.PREFIX, (Op.DESCRIBE, Op.READ)),
            Acl(Resource.TRANSACTIONAL_ID, f"{prefix}.{role}.", Pattern.PREFIX, (Op.DESCRIBE, Op.WRITE)),
            _topic(f"{prefix}.{LEASES_SUFFIX}", Op.READ),
            Acl(Resource.CLUSTER, "kafka-cluster", Pattern.LITERAL, (Op.IDEMPOTENT_WRITE,))]


def role_acls(topics: Topics) -> dict[str, list[Acl]]:
    """Each role's ACLs for the topics under ``topics.prefix``, sorted."""
    p, sim = topics.prefix, sim_cluster_topic(topics)
    acls = {
        "watcher": [_topic(topics.cluster_events, Op.READ, Op.WRITE), _topic(topics.dead_letters, Op.WRITE),
                    _topic(shard_map_topic(topics), Op.READ, Op.WRITE),
                    _topic(hand_over_topic(topics), Op.READ), _topic(held_topic(topics), Op.READ, Op.WRITE),
                    Acl(Resource.CLUSTER, "kafka-cluster", Pattern.LITERAL, (Op.IDEMPOTENT_WRITE,))],
        "scheduler": [_topic(topics.cluster_events, Op.READ, Op.WRITE), _topic(topics.decisions, Op.READ, Op.WRITE),
                      _topic(topics.snapshots, Op.READ, Op.WRITE), _topic(topics.dead_letters, Op.WRITE),
                      _topic(hand_over_topic(topics), Op.WRITE), *_writer(p, "scheduler")],
        "actuator": [_topic(topics.decisions, Op.READ), _topic(topics.cluster_events, Op.WRITE),
                     _topic(sim, Op.WRITE), *_writer(p, "actuator")],
        "simcluster": [_topic(sim, Op.READ, Op.WRITE), _topic(topics.cluster_events, Op.READ, Op.WRITE),
                       _topic(topics.decisions, Op.READ),  # is the actuator at its end? (idleness)
                       Acl(Resource.GROUP, f"{p}.scheduler", Pattern.LITERAL, (Op.DESCRIBE,)),
                       Acl(Resource.GROUP, f"{p}.actuator", Pattern.LITERAL, (Op.DESCRIBE,)),
                       *_writer(p, "simcluster")],
        "reader": [_topic(f"{p}.", Op.READ, pattern=Pattern.PREFIX)],
    }
    return {role: sorted(acls[role]) for role in ROLES}
