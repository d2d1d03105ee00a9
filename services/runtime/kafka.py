"""The Kafka backend of the log port (aiokafka), and leadership through a consumer group.

Mapping of the port onto Kafka:

* A topic of the port is a Kafka topic; one :class:`KafkaLog` is one scheduler shard's view,
  so every read and write goes to partition ``shard`` (cluster-events, decisions, snapshots
  and dead letters all have one partition per shard). Keys are as DESIGN.md says (the
  object for cluster events, the workload for decisions); values are JSON; every record
  carries the schema version in a header.
* ``transact`` is one Kafka transaction: the appends, then ``send_offsets_to_transaction``
  for the consumer positions, then commit. Readers use ``read_committed``, so an aborted or
  open transaction is never seen. Offsets are not contiguous (each commit leaves a control
  record), which every reader of the port tolerates.
* ``position`` is the consumer group's committed offset (group ``<prefix>.<group>``).
* Single writer: a log opened with a ``role`` writes through a transactional producer whose
  id is ``<prefix>.<role>.<shard>``. Starting it fences every older producer with that id
  (a zombie's next commit fails), so it is started only by the instance that holds the
  role's leadership (:meth:`KafkaLog.acquire`): members of the group
  ``<prefix>.<role>.<shard>`` share the one-partition lease topic, and the member our assignor
  gives it to leads (the current leader keeps it; else the longest-waiting standby, with a new
  term). When the leader dies the group coordinator notices within the session timeout
  (:data:`SESSION_TIMEOUT_MS`) and a standby gets the partition; a leader that stops cleanly
  leaves the group, and a standby gets it at its next heartbeat.

The port is synchronous (the scheduler core and its shells step deterministically), so
the aiokafka clients live on an event loop of their own in a daemon thread, and each
call of the port waits for its coroutine there.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import json
import logging
import os
import ssl
import threading
import time
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Final, Literal, TypeVar

import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import CoordinationType
from aiokafka.conn import create_conn
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata
from aiokafka.errors import (
    AuthenticationFailedError,
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    InvalidProducerEpoch,
    InvalidSessionTimeoutError,
    KafkaError,
    ProducerFenced,
    SaslAuthenticationFailed,
    TopicAlreadyExistsError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
    UnsupportedSaslMechanismError,
)
from aiokafka.helpers import create_ssl_context
from aiokafka.producer.sender import AddPartitionsToTxnHandler
from aiokafka.structs import OffsetAndMetadata

from events.envelope import SCHEMA_VERSION
from services.runtime.clock import wall_clock_ns
from services.runtime.log import Leadership, LeadershipLost, LogError, Outcome, Record, RecordWaiter, Refused

T = TypeVar("T")
_log = structlog.get_logger(__name__)


class _NoRebalanceChatter(logging.Filter):
    """aiokafka warns "Heartbeat failed ... because it is rebalancing" on every member of a group
    whenever another joins or leaves: in the election that is every standby starting and every
    take-over, expected and not worth a line of the service's output."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "because it is rebalancing" not in record.getMessage()


logging.getLogger("aiokafka.consumer.group_coordinator").addFilter(_NoRebalanceChatter())

ENV_PREFIX: Final = "KUEUELOG_KAFKA_"
SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
MAX_RECORD_BYTES: Final = 100 * 1024 * 1024  # a snapshot of a large state is tens of MB
LEASES_SUFFIX: Final = "leases"
# The producer's batch per partition: one request carries one batch of a partition, and an
# idempotent producer has one request per partition in flight, so a transaction of N bytes costs
# N / BATCH_BYTES round trips in a row. The client's 16 KiB default made a 1.5 MB step of the
# simulated cluster ~90 of them; records are appended at once, so the batch never waits to fill.
BATCH_BYTES: Final = 1024 * 1024
FETCH_WAIT_MS: Final = 20  # how long the broker holds a fetch that finds nothing new
# How often a read that knows records lie ahead checks whether its consumer got past them: a
# fetch that brings only transaction markers yields no record, and waiting for a record would
# sit out the next fetch's whole FETCH_WAIT_MS although the position already reached the end.
READ_CHECK_MS: Final = 2
# A transaction begun right after a commit may meet CONCURRENT_TRANSACTIONS until the previous
# markers are written; aiokafka retries after this back-off (its default, 100 ms, is most of
# a decision's latency budget).
RETRY_BACKOFF_MS: Final = 10
# The same wait has its own module-wide constant in aiokafka (20 ms, "better than 100 ms",
# KAFKA-5477): the broker writes the previous commit's markers in a few ms, so a back-to-back
# transaction waited 20-30 ms for nothing. 2 ms brings a transaction on this machine from ~35 ms
# to ~10 ms. Our producers get it when they are built (:func:`_prompt_transactions`); aiokafka's
# constant is left alone.
CONCURRENT_TXN_BACKOFF_S: Final = 0.002
# Leadership: how fast a standby notices a dead leader. The coordinator drops a member that has
# not heartbeaten for the session timeout; the standby hears of it at its next heartbeat, then
# rejoins, fences the predecessor and recovers, so a take-over after a crash takes about
# session + heartbeat + recovery (bench: ``python -m bench kafka --only failover``). Brokers
# refuse sessions below ``group.min.session.timeout.ms`` (default 6000): kueuelog's brokers need
# it at 2000 or less (deploy/strimzi/kafka.yaml), or KUEUELOG_KAFKA_SESSION_TIMEOUT_MS raised.
# The heartbeat runs on the log's I/O thread, not on the service's loop, so a long scheduling
# step delays it by at most the GIL's switch interval per wake-up.
SESSION_TIMEOUT_MS: Final = 2_000
HEARTBEAT_INTERVAL_MS: Final = 400
BROKER_MIN_SESSION_SETTING: Final = "group.min.session.timeout.ms"
HEADERS: Final = [("schema", str(SCHEMA_VERSION).encode()), ("content-type", b"application/json")]


class Fenced(Refused):
    """Another instance took over this writer's transactional id: this one must stop."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retriable=False)


@dataclass(frozen=True)
class KafkaSettings:
    """How to reach the brokers. Every field can come from ``KUEUELOG_KAFKA_<FIELD>``; the
    password is never part of ``repr`` or a log line."""

    bootstrap_servers: str
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = ""
    sasl_username: str = ""
    sasl_password: str = field(default="", repr=False)
    ssl_cafile: str = ""
    ssl_certfile: str = ""
    ssl_keyfile: str = ""
    ssl_check_hostname: bool = True
    client_id: str = "kueuelog"
    request_timeout_ms: int = 30_000
    session_timeout_ms: int = SESSION_TIMEOUT_MS
    heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS
    shards: int = 1  # partitions of the shard-partitioned topics, fixed when they are created
    replication_factor: int = 1

    def __post_init__(self) -> None:
        if not self.bootstrap_servers.strip():
            raise ValueError("kafka: bootstrap_servers is empty (set --bootstrap-servers or "
                             "KUEUELOG_KAFKA_BOOTSTRAP_SERVERS)")
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"kafka: security_protocol {self.security_protocol!r} is not one of "
                             f"{', '.join(SECURITY_PROTOCOLS)}")
        sasl = self.security_protocol.startswith("SASL_")
        if sasl and self.sasl_mechanism not in SASL_MECHANISMS:
            raise ValueError(f"kafka: sasl_mechanism {self.sasl_mechanism!r} is not one of "
                             f"{', '.join(SASL_MECHANISMS)} (needed with {self.security_protocol})")
        if sasl and not (self.sasl_username and self.sasl_password):
            raise ValueError(f"kafka: sasl_username and sasl_password are required with {self.security_protocol}")
        if not sasl and self.sasl_mechanism:
            raise ValueError(f"kafka: sasl_mechanism is set but security_protocol {self.security_protocol} "
                             "does not use SASL")
        if self.shards < 1:
            raise ValueError(f"kafka: shards must be at least 1, not {self.shards}")
        if not 0 < self.heartbeat_interval_ms < self.session_timeout_ms:
            raise ValueError(f"kafka: heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be above 0 and below "
                             f"session_timeout_ms ({self.session_timeout_ms}); a third of it or less is usual "
                             f"({ENV_PREFIX}HEARTBEAT_INTERVAL_MS, {ENV_PREFIX}SESSION_TIMEOUT_MS)")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> KafkaSettings:
        """Settings from ``KUEUELOG_KAFKA_*`` variables, then ``overrides`` (flags) that are not None."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is None:
                continue
            if f.type in ("int", int):
                try:
                    values[f.name] = int(raw)
                except ValueError:
                    raise ValueError(f"kafka: {ENV_PREFIX}{f.name.upper()}={raw!r} is not an integer") from None
            elif f.type in ("bool", bool):
                values[f.name] = raw.strip().lower() in ("1", "true", "yes", "on")
            else:
                values[f.name] = raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        if "bootstrap_servers" not in values:
            raise ValueError("kafka: no bootstrap servers "
                             "(set --bootstrap-servers or KUEUELOG_KAFKA_BOOTSTRAP_SERVERS)")
        return cls(**values)

    def client_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"bootstrap_servers": self.bootstrap_servers, "client_id": self.client_id,
                              "request_timeout_ms": self.request_timeout_ms,
                              "security_protocol": self.security_protocol}
        if self.security_protocol.startswith("SASL_"):
            kw |= {"sasl_mechanism": self.sasl_mechanism, "sasl_plain_username": self.sasl_username,
                   "sasl_plain_password": self.sasl_password}
        if self.security_protocol in ("SSL", "SASL_SSL"):
            kw["ssl_context"] = self.ssl_context()
        return kw

    def ssl_context(self) -> ssl.SSLContext:
        ctx: ssl.SSLContext = create_ssl_context(cafile=self.ssl_cafile or None, certfile=self.ssl_certfile or None,
                                 keyfile=self.ssl_keyfile or None)
        ctx.check_hostname = self.ssl_check_hostname
        return ctx


_REFUSED = (TransactionalIdAuthorizationFailed, TopicAuthorizationFailedError, GroupAuthorizationFailedError,
            ClusterAuthorizationFailedError, SaslAuthenticationFailed, AuthenticationFailedError)


def _wrap(what: str, e: BaseException) -> LogError:
    """aiokafka's errors, once, in ours. Fenced and refused (authentication, ACLs) are final; any
    other Kafka error, a timeout or a lost connection may pass (a broker restarting throws a
    variety of them, not all marked ``retriable``): the services back off and rebuild from the log."""
    if isinstance(e, LogError):
        return e
    if isinstance(e, ProducerFenced | InvalidProducerEpoch):
        return Fenced(f"{what}: fenced by a newer instance with the same transactional id ({type(e).__name__})")
    if isinstance(e, _REFUSED):
        return LogError(f"{what}: refused by the broker: {type(e).__name__}: {e}", retriable=False)
    retriable = isinstance(e, KafkaError | OSError | TimeoutError)
    return LogError(f"{what}: {type(e).__name__}: {e}", retriable=retriable)


class _PromptAddPartitions(AddPartitionsToTxnHandler):  # type: ignore[misc]
    """aiokafka's request that adds partitions to a transaction, but retrying CONCURRENT_TRANSACTIONS
    on a transaction's first partitions after CONCURRENT_TXN_BACKOFF_S rather than aiokafka's 20 ms."""

    def handle_response(self, resp: Any) -> float | None:
        backoff: float | None = super().handle_response(resp)
        txn_partitions = self._sender._txn_manager.txn_partitions
        if backoff is not None and backoff != self._default_backoff and not txn_partitions:
            return CONCURRENT_TXN_BACKOFF_S  # the one other backoff it answers: the marker wait
        return backoff


def _prompt_transactions(producer: AIOKafkaProducer) -> AIOKafkaProducer:
    """``producer``, adding partitions to its transactions with :class:`_PromptAddPartitions`."""
    sender = producer._sender

    async def add_partitions(tps: Any) -> Any:
        node_id = await sender._find_coordinator(CoordinationType.TRANSACTION, sender._txn_manager.transactional_id)
        return await _PromptAddPartitions(sender, tps).do(node_id)

    sender._do_add_partitions_to_txn = add_partitions
    return producer


def _quiet_when_fenced(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """A fenced producer's pending sends all fail with the same error, which the caller has seen
    already (as :class:`Fenced`); asyncio would print each as 'Future exception was never
    retrieved' with its traceback around the one line that matters. Anything else is reported."""
    if isinstance(context.get("exception"), ProducerFenced | InvalidProducerEpoch):
        return
    loop.default_exception_handler(context)


class _LoopThread:
    """An event loop in a daemon thread; ``run`` waits for a coroutine there, and cancels it if
    the wait fails: work the caller gave up on (a transaction above all) must not go on behind
    its back."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.set_exception_handler(_quiet_when_fenced)
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self.wait(asyncio.run_coroutine_threadsafe(coro, self.loop), timeout)

    @staticmethod
    def wait(future: concurrent.futures.Future[T], timeout: float | None = None) -> T:
        """The result of work begun on the loop; a failed or timed-out wait cancels it."""
        try:
            return future.result(timeout)
        except Exception:
            future.cancel()  # a no-op when it failed by itself; a timed-out one is stopped
            raise

    def close(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
        if not self.loop.is_running():
            self.loop.close()


class _Lease(ConsumerRebalanceListener):  # type: ignore[misc]
    """This member's view of the lease. The group revokes every partition before each rebalance
    (eager protocol) and then hands them out again, so a leader is "revoked" for a moment
    whenever a standby joins; it has lost only when the new assignment leaves it out.

    ``term`` numbers leaderships: every grant to a new leader is one more than any term a member
    of the group has seen, and the assignment tells every member the current term."""

    def __init__(self) -> None:
        self.state: Literal["none", "held", "revoked"] = "none"
        self.joined_ns = wall_clock_ns()
        self.term = 0  # the term this member leads in, 0 if it does not (or lost)
        self.seen = 0  # the newest term this member has heard of
        self.led = False  # was ever granted a term: it may keep its own, never win a new one
        self.beat_ns = 0  # when the coordinator last acknowledged a heartbeat
        self.longest_gap_ns = 0  # the longest time between two acknowledged heartbeats (the margin)
        # Proof of a live session: when the newest heartbeat the coordinator acknowledged was *sent*
        # (or the join that granted the lease began). The coordinator received it later, so until
        # this plus the session timeout it cannot have dropped this member and given the lease away.
        self.alive_since_ns = 0
        self.join_began_ns = 0

    def beat(self, sent_ns: int) -> None:
        now = time.monotonic_ns()
        if self.beat_ns:
            self.longest_gap_ns = max(self.longest_gap_ns, now - self.beat_ns)
        self.beat_ns = now
        self.alive_since_ns = max(self.alive_since_ns, sent_ns)

    def forfeit(self) -> None:
        """The coordinator no longer knows this member's generation (its session expired, or it
        was left out of a rebalance): whatever term it held is gone. It rejoins as a member that
        led before, so it can neither claim its old term back nor win a new one."""
        self.term = 0

    def fresh(self, session_timeout_ms: int) -> bool:
        """Is this member's session known to be alive on the coordinator now? A member frozen
        (SIGSTOP, a stalled VM) past its session may still believe it holds the lease until its
        next heartbeat is answered; it is not fresh, so it must not start a writer."""
        return bool(self.alive_since_ns) and time.monotonic_ns() - self.alive_since_ns < session_timeout_ms * 1_000_000

    async def on_partitions_revoked(self, revoked: Any) -> None:
        # Called before every join request (with nothing revoked on the first one).
        self.join_began_ns = time.monotonic_ns()
        if revoked and self.state == "held":
            self.state = "revoked"

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.state = "held" if assigned else "none"
        if not assigned:
            self.term = 0
        elif self.join_began_ns:
            self.alive_since_ns = max(self.alive_since_ns, self.join_began_ns)


def _time_heartbeats(consumer: AIOKafkaConsumer, lease: _Lease) -> None:
    """Note every heartbeat the coordinator acknowledges in ``lease``: the longest gap between two
    is how close this member came to losing its session (e.g. while the scheduler computes), and
    when the newest was sent proves the session alive. A reset generation forfeits the term."""
    coordinator = consumer._coordinator
    heartbeat = coordinator._do_heartbeat

    async def timed() -> bool:
        sent = time.monotonic_ns()
        ok: bool = await heartbeat()
        if ok:
            lease.beat(sent)
        return ok

    coordinator._do_heartbeat = timed
    reset = coordinator.reset_generation

    def forfeiting_reset() -> None:
        lease.forfeit()
        reset()

    coordinator.reset_generation = forfeiting_reset


class _LeaseAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """Who leads: the member that holds a term keeps the lease (a standby joining does not unseat
    it); when nobody holds one, the longest-waiting member that never led gets a new, higher term.
    A member dropped from the group (its session expired: a frozen or starved leader) forfeits its
    term as soon as it learns so (aiokafka resets its generation), and having led it never wins a
    new one: a thawed zombie never wins the lease back, even when the group knew nothing of terms
    meanwhile (its successor may have been granted term 1 by a group of newcomers). Each member's class
    is a subclass bound to its own :class:`_Lease` (aiokafka calls assignors as classes)."""

    name = "kueuelog-lease"
    version = 0
    lease: _Lease

    @classmethod
    def metadata(cls, topics: Any) -> ConsumerProtocolMemberMetadata:
        info = {"joined": cls.lease.joined_ns, "term": cls.lease.term, "seen": cls.lease.seen, "led": cls.lease.led}
        return ConsumerProtocolMemberMetadata(cls.version, list(topics), json.dumps(info).encode())

    @classmethod
    def assign(cls, cluster: Any, members: Mapping[str, Any]) -> dict[str, ConsumerProtocolMemberAssignment]:
        info: dict[str, dict[str, int]] = {}
        for member_id, meta in members.items():
            try:
                info[member_id] = json.loads(bytes(meta.user_data or b"{}"))
            except ValueError:
                info[member_id] = {}
        seen = max([0] + [max(i.get("term", 0), i.get("seen", 0)) for i in info.values()])
        # A member still holding a term was never dropped from the group since it was granted (a
        # dropped one forfeits it on rejoining), so at most one does; the newest wins a tie anyway.
        holders = sorted((-i["term"], m) for m, i in info.items() if i.get("term", 0) > 0)
        winner: str | None
        if holders:
            winner, term = holders[0][1], -holders[0][0]
        else:
            fresh = sorted((i.get("joined", 0), m) for m, i in info.items() if not i.get("term") and not i.get("led"))
            winner, term = (fresh[0][1] if fresh else None), seen + 1
        topics = sorted({t for meta in members.values() for t in meta.subscription})
        out: dict[str, ConsumerProtocolMemberAssignment] = {}
        for member_id in members:
            parts = [(t, [0]) for t in topics] if member_id == winner else []
            out[member_id] = ConsumerProtocolMemberAssignment(cls.version, parts, json.dumps({"term": term}).encode())
        return out

    @classmethod
    def on_assignment(cls, assignment: ConsumerProtocolMemberAssignment) -> None:
        try:
            term = int(json.loads(bytes(assignment.user_data or b"{}")).get("term", 0))
        except ValueError:
            term = 0
        cls.lease.seen = max(cls.lease.seen, term)
        cls.lease.term = term if assignment.assignment else 0
        cls.lease.led = cls.lease.led or bool(cls.lease.term)


@dataclass
class _Reader:
    consumer: AIOKafkaConsumer
    tp: TopicPartition
    next: int = -1  # where the consumer's fetch position is, if we know
    end: int = 0  # last known end (last stable offset)
    empty_from: int = -1  # no record lies in [empty_from, next): only control records were there
    pending: list[Any] = field(default_factory=list)  # fetched by a wait, not read yet
    pending_from: int = -1  # the read position the pending records continue
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one fetch at a time per consumer

    def at(self, start: int) -> bool:
        """Is the consumer positioned to return the records from ``start`` on?"""
        return self.next == start or 0 <= self.empty_from <= start <= self.next


class KafkaLog:
    """One shard's view of the kueuelog topics on a Kafka cluster. It is its own leadership (the
    election of :meth:`acquire`) and its own record waiter (a long-poll fetch)."""

    def __init__(self, settings: KafkaSettings, *, prefix: str = "kueuelog", shard: int = 0,
                 role: str | None = None) -> None:
        if not 0 <= shard < settings.shards:
            raise ValueError(f"kafka: shard {shard} is outside 0..{settings.shards - 1}")
        self.settings = settings
        self.prefix = prefix
        self.shard = shard
        self.role = role
        self.transactional_id = f"{prefix}.{role}.{shard}" if role else None
        self._io = _LoopThread(f"kafka-{role or 'reader'}-{shard}")
        self._admin: AIOKafkaAdminClient | None = None
        self._producer: AIOKafkaProducer | None = None
        self._producer_broken = False
        # One transaction at a time on the producer, whoever begins it (services sharing this log
        # in one process, the leadership task).
        self._txn_lock = asyncio.Lock()
        self._readers: dict[str, _Reader] = {}
        self._committed: dict[tuple[str, str], int] = {}
        self._own_end: dict[str, int] = {}
        self._known: set[str] = set()
        self._lease_consumer: AIOKafkaConsumer | None = None
        self._lease_task: asyncio.Task[None] | None = None
        self._lease: _Lease | None = None
        self._lease_name: str | None = None
        self._lease_error: LogError | None = None  # the election cannot go on (a refused session timeout)
        self._announced = False  # "leading" logged for the current leadership
        self._closed = False
        try:
            self._run(self._start_admin(), "connect")
        except BaseException:
            self._io.close()
            raise

    @property
    def leadership(self) -> Leadership:
        return self

    @property
    def waiter(self) -> RecordWaiter | None:
        return self

    # --- plumbing -------------------------------------------------------------------------

    def _run(self, coro: Coroutine[Any, Any, T], what: str) -> T:
        """Run ``coro`` on the I/O thread and wait; a failure or timeout comes out as a LogError
        (and the work is cancelled: a timed-out transaction must not commit after the service
        rebuilt from the log and wrote that step again)."""
        return self._wait(asyncio.run_coroutine_threadsafe(coro, self._io.loop), what)

    def _wait(self, future: concurrent.futures.Future[T], what: str) -> T:
        try:
            return self._io.wait(future, timeout=self.settings.request_timeout_ms / 1000 * 3)
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt | SystemExit):
                raise
            raise _wrap(f"kafka {what}", e) from e

    async def _start_admin(self) -> None:
        if self.settings.security_protocol.startswith("SASL_"):
            await self._check_login()
        self._admin = AIOKafkaAdminClient(**self.settings.client_kwargs())
        await self._admin.start()

    async def _check_login(self) -> None:
        """aiokafka reports a refused login only as "unable to bootstrap" (retriable, and the reason
        goes to its log): log in once ourselves so that a wrong password is a clear, final error."""
        kw = self.settings.client_kwargs()
        errors: list[str] = []
        for address in self.settings.bootstrap_servers.split(","):
            host, _, port = address.strip().rpartition(":")
            try:
                conn = await create_conn(host, int(port), client_id=kw["client_id"],
                                         request_timeout_ms=kw["request_timeout_ms"],
                                         ssl_context=kw.get("ssl_context"), security_protocol=kw["security_protocol"],
                                         sasl_mechanism=kw["sasl_mechanism"],
                                         sasl_plain_username=kw["sasl_plain_username"],
                                         sasl_plain_password=kw["sasl_plain_password"])
            except (SaslAuthenticationFailed, AuthenticationFailedError, UnsupportedSaslMechanismError) as e:
                raise LogError(f"kafka: {address} refused the {self.settings.sasl_mechanism} login of user "
                               f"{self.settings.sasl_username!r}: {type(e).__name__}", retriable=False) from None
            except (TimeoutError, OSError, KafkaError, ValueError) as e:
                errors.append(f"{address}: {type(e).__name__}")
                continue
            conn.close()
            return
        raise LogError(f"kafka: cannot reach any bootstrap server ({'; '.join(errors)})", retriable=True)

    def group_id(self, group: str) -> str:
        return f"{self.prefix}.{group}"

    def _tp(self, topic: str) -> TopicPartition:
        return TopicPartition(topic, self.shard)

    # --- topics ---------------------------------------------------------------------------

    def topic_config(self, topic: str) -> dict[str, str]:
        """Settings a kueuelog topic is created with: the log is the truth, so nothing expires;
        snapshots are a cache, so only the newest per key is kept."""
        config = {"retention.ms": "-1", "retention.bytes": "-1", "max.message.bytes": str(MAX_RECORD_BYTES)}
        if topic.endswith(".scheduler-snapshots"):
            config |= {"cleanup.policy": "compact", "min.compaction.lag.ms": "60000"}
        return config

    async def _ensure(self, topic: str, partitions: int | None = None) -> None:
        """Create ``topic`` unless it exists. Least-privilege credentials may not create topics
        (the platform does, e.g. Strimzi's topic operator): an existing topic needs no such right,
        and a missing one that may not be created is waited for (retriable) with the reason."""
        if topic in self._known:
            return
        assert self._admin is not None
        if topic in await self._admin.list_topics():
            self._known.add(topic)
            return
        count = partitions or self.settings.shards
        resp = await self._admin.create_topics(
            [NewTopic(topic, count, self.settings.replication_factor, topic_configs=self.topic_config(topic))])
        for _, code, *rest in resp.topic_errors:
            if code in (TopicAuthorizationFailedError.errno, ClusterAuthorizationFailedError.errno):
                raise LogError(f"kafka: topic {topic} is not visible to this credential (it does not exist yet, "
                               f"or the credential may not describe it) and may not be created by it: create the "
                               f"topic (deploy/strimzi/kafka.yaml lists every topic) or fix the credential's ACLs",
                               retriable=True)
            if code not in (0, TopicAlreadyExistsError.errno):
                raise LogError(f"kafka: cannot create topic {topic}: error {code} {rest}", retriable=False)
        self._known.add(topic)

    def ensure_topics(self, topics: Sequence[str]) -> None:
        for t in topics:
            self._run(self._ensure(t), f"create topic {t}")

    # --- reading --------------------------------------------------------------------------

    async def _reader(self, topic: str) -> _Reader:
        r = self._readers.get(topic)
        if r is None:
            await self._ensure(topic)
            consumer = AIOKafkaConsumer(**self.settings.client_kwargs(), isolation_level="read_committed",
                                        enable_auto_commit=False, auto_offset_reset="earliest",
                                        max_partition_fetch_bytes=MAX_RECORD_BYTES,
                                        fetch_max_bytes=MAX_RECORD_BYTES,
                                        # A fetch waiting at the end of the partition delays a seek
                                        # until it returns; keep that wait short.
                                        fetch_max_wait_ms=FETCH_WAIT_MS)
            await consumer.start()
            tp = self._tp(topic)
            consumer.assign([tp])
            r = self._readers[topic] = _Reader(consumer, tp)
        return r

    async def _end(self, r: _Reader) -> int:
        """The last stable offset, or past this writer's own newest committed record if that is
        further: a commit returns before its markers are written, and until then the broker's
        LSO stays below the records just committed (read-your-writes for the writer itself)."""
        offsets: dict[TopicPartition, int] = await r.consumer.end_offsets([r.tp])
        r.end = max(offsets[r.tp], self._own_end.get(r.tp.topic, 0))
        return r.end

    @staticmethod
    def _records(topic: str, msgs: Sequence[Any]) -> list[Record]:
        return [Record(topic, m.offset, (m.key or b"").decode(), m.value or b"") for m in msgs]

    async def _read(self, topic: str, start: int, limit: int) -> list[Record]:
        r = await self._reader(topic)
        async with r.lock:
            if r.pending and r.pending_from == start:
                out, r.pending = r.pending[:limit], r.pending[limit:]
                r.pending_from = out[-1].offset + 1
                return self._records(topic, out)
            r.pending = []  # fetched for another position
            if r.at(start):
                # Records the consumer has fetched already (its fetcher runs ahead of the reads):
                # take them without asking the broker where the end is, a round trip per read.
                got = await r.consumer.getmany(r.tp, timeout_ms=0, max_records=limit)
                msgs = got.get(r.tp, [])
                if msgs:
                    r.next, r.empty_from = msgs[-1].offset + 1, -1
                    return self._records(topic, msgs)
            if start >= r.end and start >= await self._end(r):
                return []
            if not r.at(start):
                r.consumer.seek(r.tp, start)
                r.next, r.empty_from = start, -1
            deadline = asyncio.get_running_loop().time() + self.settings.request_timeout_ms / 1000
            while True:
                got = await r.consumer.getmany(r.tp, timeout_ms=READ_CHECK_MS, max_records=limit)
                msgs = got.get(r.tp, [])
                if msgs:
                    r.next, r.empty_from = msgs[-1].offset + 1, -1
                    return self._records(topic, msgs)
                self._skipped(r, start, await r.consumer.position(r.tp))
                # Only control records were left before the end, unless the end moved since it was
                # last asked (this writer's own commits, or anyone's): ask again before saying so.
                if r.next >= r.end and r.next >= await self._end(r):
                    return []
                if asyncio.get_running_loop().time() > deadline:
                    raise LogError(f"kafka: no records from {topic} at {r.next} although it ends at {r.end}",
                                   retriable=True)

    @staticmethod
    def _skipped(r: _Reader, start: int, position: int) -> None:
        """A fetch from ``start`` brought no record and left the consumer at ``position``."""
        if r.empty_from == -1 or not r.empty_from <= start <= r.next:
            r.empty_from = start
        r.next = position

    async def wait_for_records(self, topic: str, start: int, timeout: float) -> bool:
        """Wait until ``topic`` has a record at or after ``start`` (True), or ``timeout`` seconds
        passed (False), without blocking the caller's event loop: a long-poll fetch, so an idle
        consumer sees a new record as soon as it is committed instead of at its next poll. The
        records fetched are kept for the next ``read`` from ``start``."""
        future = asyncio.run_coroutine_threadsafe(self._wait_for(topic, start, timeout), self._io.loop)
        try:
            return await asyncio.wrap_future(future)
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt | SystemExit | asyncio.CancelledError):
                raise
            raise _wrap(f"kafka wait on {topic}", e) from e

    async def _wait_for(self, topic: str, start: int, timeout: float) -> bool:
        r = await self._reader(topic)
        async with r.lock:
            if r.pending and r.pending_from == start:
                return True
            r.pending = []
            if not r.at(start):
                r.consumer.seek(r.tp, start)
                r.next, r.empty_from = start, -1
            got = await r.consumer.getmany(r.tp, timeout_ms=max(1, int(timeout * 1000)), max_records=1000)
            msgs = got.get(r.tp, [])
            if not msgs:
                self._skipped(r, start, await r.consumer.position(r.tp))
                return False
            r.pending, r.pending_from = list(msgs), start
            r.next, r.empty_from = msgs[-1].offset + 1, -1
            return True

    def read(self, topic: str, start: int, limit: int = 1000) -> list[Record]:
        return self._run(self._read(topic, start, limit), f"read {topic}")

    def read_values(self, topic: str, start: int, limit: int = 1000) -> list[tuple[int, bytes]]:
        return [(r.offset, r.value) for r in self.read(topic, start, limit)]

    def end_offset(self, topic: str) -> int:
        async def end() -> int:
            return await self._end(await self._reader(topic))
        return self._run(end(), f"end offset of {topic}")

    def position(self, group: str, topic: str) -> int:
        """The group's committed position. This writer's own commits are answered from memory: the
        broker shows a transactional offset commit only once its markers are written, a few ms after
        the commit returns. (A successor reads the position after starting its producer, which
        waits for its predecessor's transaction to complete.)"""
        mine = self._committed.get((group, topic))
        if mine is not None:
            return mine

        async def committed() -> int:
            assert self._admin is not None
            tp = self._tp(topic)
            deadline = asyncio.get_running_loop().time() + self.settings.request_timeout_ms / 1000
            while True:
                try:
                    offsets = await self._admin.list_consumer_group_offsets(self.group_id(group), partitions=[tp])
                    break
                except KafkaError as e:
                    # The group coordinator is not there yet (the offsets topic is created on first use,
                    # or a broker is restarting): ask again until the request timeout.
                    if not e.retriable or asyncio.get_running_loop().time() > deadline:
                        raise
                    await asyncio.sleep(0.1)
            om = offsets.get(tp)
            return om.offset if om is not None and om.offset >= 0 else 0
        return self._run(committed(), f"position of {group} on {topic}")

    # --- writing --------------------------------------------------------------------------

    async def _producer_ready(self) -> AIOKafkaProducer:
        if self._producer is not None and not self._producer_broken:
            return self._producer
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await self._producer.stop()
            self._producer = None
        if self.transactional_id and self._lease is not None and not self._lease_fresh():
            # Starting a transactional producer fences the current owner of the id: only the leader
            # may, and only while its session is known to be alive. A leader frozen past its session
            # (a zombie) whose writer broke would otherwise fence its successor with a new one.
            raise LeadershipLost(f"kafka: {self._lease_name} leadership is not held (or its session may have "
                                 f"expired); not starting transactional producer {self.transactional_id}")
        producer = _prompt_transactions(AIOKafkaProducer(
            **self.settings.client_kwargs(), transactional_id=self.transactional_id, enable_idempotence=True,
            acks="all", max_request_size=MAX_RECORD_BYTES, max_batch_size=BATCH_BYTES, linger_ms=0,
            retry_backoff_ms=RETRY_BACKOFF_MS))
        await producer.start()  # with a transactional id: InitProducerId, which fences older epochs
        if self.transactional_id and self._lease is not None and not self._lease_fresh():
            # Stalled past the session between the check above and InitProducerId: a successor may
            # lead now, and this writer may have fenced it. Give up rather than win the lease back.
            with contextlib.suppress(Exception):
                await producer.stop()
            raise LeadershipLost(f"kafka: {self._lease_name} session may have expired while starting transactional "
                                 f"producer {self.transactional_id}; not leading")
        self._producer, self._producer_broken = producer, False
        return producer

    async def _send_all(self, producer: AIOKafkaProducer,
                        appends: Mapping[str, Sequence[tuple[str, bytes]]]) -> dict[str, list[int]]:
        futures: dict[str, list[asyncio.Future[Any]]] = {}
        for topic, records in appends.items():
            await self._ensure(topic)
            futures[topic] = [await producer.send(topic, value, key=key.encode(), partition=self.shard,
                                                  headers=HEADERS) for key, value in records]
        return {topic: [(await f).offset for f in fs] for topic, fs in futures.items()}

    async def _transact(self, appends: Mapping[str, Sequence[tuple[str, bytes]]],
                        commits: Mapping[tuple[str, str], int]) -> dict[str, list[int]]:
        for records in appends.values():
            for key, _ in records:
                if not isinstance(key, str):
                    raise LogError(f"kafka: record key must be a string, not {type(key).__name__}", retriable=False)
        async with self._txn_lock:
            return await self._transact_now(appends, commits)

    async def _transact_now(self, appends: Mapping[str, Sequence[tuple[str, bytes]]],
                            commits: Mapping[tuple[str, str], int]) -> dict[str, list[int]]:
        producer = await self._producer_ready()
        if not self.transactional_id:
            if commits:
                raise LogError("kafka: committing consumer positions needs a log opened with a role "
                               "(a transactional producer)", retriable=False)
            return self._wrote(await self._send_all(producer, appends))
        try:
            async with producer.transaction():
                out = await self._send_all(producer, appends)
                by_group: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
                for (group, topic), offset in commits.items():
                    await self._ensure(topic)
                    by_group.setdefault(self.group_id(group), {})[self._tp(topic)] = OffsetAndMetadata(offset, "")
                for group_id, offsets in sorted(by_group.items()):
                    await producer.send_offsets_to_transaction(offsets, group_id)
            self._committed.update(commits)
            self._wrote(out)
        except BaseException as e:
            wrapped = _wrap("kafka transaction", e)
            if not isinstance(wrapped, Fenced):
                self._producer_broken = True  # start afresh (and only as leader) before the next one
            raise wrapped from e
        return out

    def _wrote(self, out: dict[str, list[int]]) -> dict[str, list[int]]:
        for topic, offsets in out.items():
            if offsets:
                self._own_end[topic] = max(self._own_end.get(topic, 0), offsets[-1] + 1)
        return out

    def transact(self, appends: Mapping[str, Sequence[tuple[str, bytes]]],
                 commits: Mapping[tuple[str, str], int]) -> dict[str, list[int]]:
        """Appends and consumer-position commits in one Kafka transaction."""
        return self._run(self._transact(appends, commits), "transaction")

    def transact_in_background(self, appends: Mapping[str, Sequence[tuple[str, bytes]]],
                               commits: Mapping[tuple[str, str], int]) -> Outcome:
        """:meth:`transact` begun on the I/O thread; the caller goes on and waits for the outcome
        later (``services.runtime.log.begin_transaction``), and the wait is :meth:`_run`'s."""
        future = asyncio.run_coroutine_threadsafe(self._transact(appends, commits), self._io.loop)
        return functools.partial(self._wait, future, "transaction")

    def append(self, topic: str, records: Sequence[tuple[str, bytes]]) -> list[int]:
        """Append and wait until the records are acknowledged by all in-sync replicas."""
        return self.transact({topic: records}, {})[topic]

    def commit(self, group: str, topic: str, next_offset: int) -> None:
        self.transact({}, {(group, topic): next_offset})

    # --- leadership -----------------------------------------------------------------------

    def lease_topic(self) -> str:
        return f"{self.prefix}.{LEASES_SUFFIX}"

    async def _lead(self, name: str) -> _Lease:
        await self._ensure(self.lease_topic(), partitions=1)
        lease = _Lease()
        assignor = type("BoundLeaseAssignor", (_LeaseAssignor,), {"lease": lease})
        consumer = AIOKafkaConsumer(**self.settings.client_kwargs(), group_id=f"{self.prefix}.{name}.{self.shard}",
                                    enable_auto_commit=False,
                                    partition_assignment_strategy=(assignor,),
                                    session_timeout_ms=self.settings.session_timeout_ms,
                                    heartbeat_interval_ms=self.settings.heartbeat_interval_ms)
        await consumer.start()
        _time_heartbeats(consumer, lease)
        consumer.subscribe([self.lease_topic()], listener=lease)

        async def keep_polling() -> None:
            # Membership needs polls (max_poll_interval); the records themselves mean nothing.
            while True:
                try:
                    await consumer.getmany(timeout_ms=500)
                except InvalidSessionTimeoutError:
                    self._lease_error = self._session_refused(name)
                    return
                except KafkaError:
                    pass
                await asyncio.sleep(0.2)

        self._lease_consumer = consumer
        self._lease_task = asyncio.ensure_future(keep_polling())
        return lease

    def _session_refused(self, name: str) -> LogError:
        timeout = self.settings.session_timeout_ms
        return LogError(
            f"kafka: the broker refused the {name} election's session timeout of {timeout} ms "
            f"(InvalidSessionTimeoutError): it is below the broker's {BROKER_MIN_SESSION_SETTING} (Kafka's default "
            f"is 6000). Set {BROKER_MIN_SESSION_SETTING}={timeout} or lower on the brokers (deploy/strimzi/kafka.yaml "
            f"does), or raise {ENV_PREFIX}SESSION_TIMEOUT_MS to the broker's minimum (a standby then takes over "
            f"that much later after a crash)", retriable=False)

    async def acquire(self, name: str, stop: asyncio.Event | None = None, *, poll_seconds: float = 0.05) -> bool:
        """Join the election for ``name`` (this shard) and wait until this instance leads it or
        ``stop`` is set; True once leading. Called from the service's own event loop."""
        if self._lease_name is None:
            self._lease = self._run(self._lead(name), f"join {name} election")
            self._lease_name = name
            _log.info("waiting for leadership", role=name, shard=self.shard)
        while not (self._lease_name == name and self._lease_fresh()):
            if stop is not None and stop.is_set():
                return False
            if self._lease_error is not None:
                raise self._lease_error
            await asyncio.sleep(poll_seconds)
        if self.transactional_id:
            # Fence the predecessor now, and wait for its last transaction to complete, so that what
            # this leader reads next (positions, the tail of its output) is final.
            self._run(self._producer_ready(), f"start {name} writer")
        if not self._announced:  # once per leadership, however many parts of the process ask for it
            _log.info("leading", role=name, shard=self.shard, transactional_id=self.transactional_id)
            self._announced = True
        return True

    def _lease_fresh(self) -> bool:
        """Held, with a session known to be alive (see :meth:`_Lease.fresh`)."""
        lease = self._lease
        return lease is not None and lease.state == "held" and lease.fresh(self.settings.session_timeout_ms)

    def holds(self, name: str) -> bool:
        """Not known to have lost ``name``: held, or revoked for a rebalance whose outcome is not in
        yet (writing on meanwhile is safe: a successor's producer would fence this one first)."""
        return self._lease_name == name and self._lease is not None and self._lease.state != "none"

    def release(self, name: str) -> None:
        if self._lease_name != name:
            return

        async def leave() -> None:
            if self._lease_task is not None:
                self._lease_task.cancel()
                with contextlib.suppress(BaseException):
                    await self._lease_task
            if self._lease_consumer is not None:
                await self._lease_consumer.stop()  # leaves the group: a standby takes over at once
            self._lease_task = self._lease_consumer = None

        if self._lease is not None:  # how close the heartbeat came to the session timeout
            _log.info("left the election", role=name, shard=self.shard,
                      longest_heartbeat_gap_ms=self._lease.longest_gap_ns // 1_000_000,
                      session_timeout_ms=self.settings.session_timeout_ms)
        with contextlib.suppress(LogError):
            self._run(leave(), f"leave {name} election")
        self._lease_name, self._lease, self._announced = None, None, False

    # --- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._lease_name is not None:
            self.release(self._lease_name)

        async def stop_all() -> None:
            for r in self._readers.values():
                with contextlib.suppress(Exception):
                    await r.consumer.stop()
            if self._producer is not None:
                with contextlib.suppress(Exception):
                    await self._producer.stop()
            if self._admin is not None:
                with contextlib.suppress(Exception):
                    await self._admin.close()

        with contextlib.suppress(Exception):
            self._io.run(stop_all(), timeout=30)
        self._io.close()

    def __enter__(self) -> KafkaLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
