"""A real single-node Apache Kafka broker (KRaft) on 127.0.0.1, for tests and `make kafka`.

This module owns the local broker's whole life cycle:

* installing it: the broker's runtime classpath is resolved from Maven Central through
  ``deploy/kafka/pom.xml`` into ``${KUEUELOG_CACHE:-$HOME/.cache/kueuelog}/kafka-<version>/libs``,
  once per version (a stamp file guards it, and the copy is swapped in atomically);
* running it: free ports, ``server.properties`` with static voters, storage format, the JVM
  in its own process group with its output in ``<run_dir>/broker.log``;
* knowing when it is ready: a Kafka Metadata request answered with our broker in it,
  spoken over a plain socket so this module needs nothing outside the standard library;
* stopping it: SIGTERM, then SIGKILL, also at interpreter exit and (on Linux) when this
  process dies without running its exit handlers.

``python -m tests.infra.kafka run`` starts one broker and blocks until Ctrl-C / SIGTERM;
``python -m tests.infra.kafka install`` only fills the cache. ``KUEUELOG_KAFKA_VERSION``
selects another Kafka release (4.1.1 is the tested default; 3.9.1 also passes).
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from tests.infra.procs import die_with_parent

DEFAULT_VERSION = "4.1.1"
REPO_ROOT = Path(__file__).resolve().parents[2]
POM = REPO_ROOT / "deploy" / "kafka" / "pom.xml"
# Pinned so that a fresh machine resolves exactly what CI resolved.
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
NODE_ID = 1
# Users of the SASL_PLAINTEXT listener (test credentials for a throwaway local broker). The broker
# authorizes with ACLs: "kueuelog" and the PLAINTEXT listener's ANONYMOUS are super users (every other
# test talks to the broker as one of them); the role users may do only what their ACLs allow, which
# tests grant from services.runtime.kafka_acls, so the least-privilege ACLs are tried for real.
SASL_USERS = {"kueuelog": "kueuelog-test-secret",
              **{f"kueuelog-{role}": f"{role}-test-secret"
                 for role in ("watcher", "scheduler", "actuator", "simcluster", "reader")}}
SUPER_USERS = ("User:ANONYMOUS", "User:kueuelog")
START_TIMEOUT_S = 90.0
# The local broker lives for one test session or benchmark, on a small machine: the JVM's
# optimising compiler (C2) would spend 4-15 s of CPU per 30 s of load recompiling the broker's
# hot paths, CPU taken from the services under test (it doubled the scheduler's p99 latency on
# 2 cores). The quick compiler alone costs the broker ~20% more CPU on the hot paths and never
# stalls. The default collector (G1 on this machine) kept marking the old generation
# concurrently under load: in the large-scale bench its marking threads took 4.5 s and its
# workers 1.7 s of the broker's 17 s of CPU. The parallel collector has no concurrent phase; its
# young collections on this heap take ~10 ms. A long-running production broker is the opposite
# case: leave its JVM alone.
JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseParallelGC")
STOP_TIMEOUT_S = 30.0
INSTALL_TIMEOUT_S = 900.0
# A port picked free can be taken by someone else before the JVM binds it; a few fresh
# attempts make that race harmless instead of a flaky test session.
PORT_ATTEMPTS = 3


class KafkaError(RuntimeError):
    """Installing, starting or probing the local broker failed."""


def cache_root() -> Path:
    """Where downloads live: outside the clone, so a fresh CI clone reuses them."""
    env = os.environ.get("KUEUELOG_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "kueuelog"


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise KafkaError("java not found on PATH (Kafka needs Java 17+)")
    return found


@contextlib.contextmanager
def _flock(path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``path`` for the duration of the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _free_ports(count: int) -> list[int]:
    """Ports the kernel considers free right now; all held open together so they differ."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _cluster_id() -> str:
    # KRaft cluster ids are a UUID rendered as unpadded url-safe base64 (22 chars).
    return base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()


# Kafka dumps every config object it builds as "\tkey = value" lines, hundreds at a time;
# in a report they would crowd out the lines that explain a failure. Stack frames ("\tat ...")
# do not match and are kept.
_CONFIG_DUMP_LINE = re.compile(r"^\t[\w.-]+ = ")
_LOG_ERROR_LINE = re.compile(r"^\S+ \[[^\]]*\] ERROR ")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _read_from(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"


def _summarize_log(text: str, tail_lines: int = 40, error_lines: int = 15) -> str:
    """The first ERROR (with its stack trace) and the tail, minus config dumps.

    A broker that fails to start logs the cause once and then hundreds of shutdown lines,
    so a plain tail would hide the one line that matters.
    """
    lines = [line for line in text.splitlines() if not _CONFIG_DUMP_LINE.match(line)]
    first_error = next((i for i, line in enumerate(lines) if _LOG_ERROR_LINE.match(line)), None)
    parts = []
    if first_error is not None and first_error < len(lines) - tail_lines:
        parts.append("--- first error ---")
        parts.extend(lines[first_error : first_error + error_lines])
        parts.append("--- tail ---")
    parts.extend(lines[-tail_lines:])
    return "\n".join(parts)


# --- a minimal Kafka wire-protocol client, just enough to ask for metadata ---------------


def _kstr(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return bytes(buf)


def _request(sock: socket.socket, api_key: int, api_version: int, correlation_id: int, body: bytes) -> bytes:
    """Send one request (header v1) and return the response body after the correlation id."""
    header = struct.pack(">hhi", api_key, api_version, correlation_id) + _kstr("kueuelog-probe")
    payload = header + body
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    (size,) = struct.unpack(">i", _recv_exact(sock, 4))
    resp = _recv_exact(sock, size)
    (got,) = struct.unpack_from(">i", resp, 0)
    if got != correlation_id:
        raise KafkaError(f"correlation id mismatch: sent {correlation_id}, got {got}")
    return resp[4:]


API_METADATA = 3
API_API_VERSIONS = 18
METADATA_VERSION = 1  # non-flexible, and kept by every broker from 0.10 through 4.x


def probe_metadata(host: str, port: int, timeout: float = 3.0) -> list[tuple[int, str, int]]:
    """Ask the broker for cluster metadata; return its (node_id, host, port) brokers.

    Raises OSError / KafkaError when the broker cannot answer yet. An open port is not
    enough: the request must travel the whole request path and come back with brokers.
    """
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        # ApiVersions v0 first: every broker must answer it, and it tells us whether the
        # Metadata version we are about to speak is still supported (Kafka 4 dropped many
        # old protocol versions, KIP-896) so a mismatch is reported, not mistaken for "not ready".
        body = _request(sock, API_API_VERSIONS, 0, 1, b"")
        (error_code, count) = struct.unpack_from(">hi", body, 0)
        if error_code:
            raise KafkaError(f"ApiVersions error code {error_code}")
        ranges = {
            key: (lo, hi)
            for key, lo, hi in (struct.unpack_from(">hhh", body, 6 + 6 * i) for i in range(count))
        }
        lo, hi = ranges.get(API_METADATA, (-1, -1))
        if not lo <= METADATA_VERSION <= hi:
            raise KafkaError(f"broker does not support Metadata v{METADATA_VERSION} (supports {lo}..{hi})")

        # Metadata v1 with an empty topic list: brokers and controller only.
        body = _request(sock, API_METADATA, METADATA_VERSION, 2, struct.pack(">i", 0))
        (n_brokers,) = struct.unpack_from(">i", body, 0)
        pos = 4
        brokers = []
        for _ in range(n_brokers):
            (node_id, host_len) = struct.unpack_from(">ih", body, pos)
            pos += 6
            broker_host = body[pos : pos + host_len].decode()
            pos += host_len
            (broker_port, rack_len) = struct.unpack_from(">ih", body, pos)
            pos += 6 + max(rack_len, 0)
            brokers.append((node_id, broker_host, broker_port))
        return brokers


# --- the broker ---------------------------------------------------------------------------


class LocalKafka:
    """One single-node KRaft broker+controller, installed from Maven Central and run as a JVM."""

    def __init__(
        self,
        version: str | None = None,
        cache_dir: Path | None = None,
        heap: tuple[str, str] = ("256m", "512m"),
        jvm_options: tuple[str, ...] = JVM_OPTIONS,
    ) -> None:
        self.version = version or os.environ.get("KUEUELOG_KAFKA_VERSION", DEFAULT_VERSION)
        self.cache_dir = cache_dir or cache_root()
        self.home = self.cache_dir / f"kafka-{self.version}"
        self.libs = self.home / "libs"
        self.heap = heap
        self.jvm_options = jvm_options
        self.run_dir: Path | None = None
        self.port: int | None = None
        self.controller_port: int | None = None
        self.sasl_port: int | None = None  # SASL_PLAINTEXT with PLAIN: SASL_USERS may log in
        self.process: subprocess.Popen[bytes] | None = None
        self.start_seconds: float | None = None  # wall time of the last successful start()
        self.install_seconds: float | None = None  # set only when this object downloaded
        self._run_lock_fd: int | None = None
        self._log_offset = 0  # where this start's output begins in broker.log

    # -- install ---------------------------------------------------------------------------

    @property
    def _stamp(self) -> Path:
        return self.home / "installed.stamp"

    def _stamp_text(self) -> str:
        # Keyed on the version and on the pom, so changing either (e.g. the logging
        # backend) re-resolves instead of silently reusing a stale classpath.
        pom_hash = hashlib.sha256(POM.read_bytes()).hexdigest()[:16]
        return f"kafka {self.version} pom {pom_hash}\n"

    def is_installed(self) -> bool:
        try:
            return self._stamp.read_text() == self._stamp_text() and self.libs.is_dir()
        except OSError:
            return False

    def ensure_installed(self) -> None:
        """Resolve the broker's jars into the cache, once per version; safe to race."""
        if self.is_installed():
            return
        mvn = shutil.which("mvn")
        if not mvn:
            raise KafkaError("mvn not found on PATH (needed once to fetch Kafka from Maven Central)")
        self.home.mkdir(parents=True, exist_ok=True)
        # Two sessions installing at once (e.g. `make kafka` and a test run) must not
        # interleave; the second one waits and then sees the stamp.
        with _flock(self.home / ".install.lock"):
            if self.is_installed():
                return
            t0 = time.monotonic()
            # Leftovers of an interrupted install: never trust them.
            for stale in self.home.glob(".libs-*"):
                shutil.rmtree(stale, ignore_errors=True)
            self._stamp.unlink(missing_ok=True)
            shutil.rmtree(self.libs, ignore_errors=True)
            staging = Path(tempfile.mkdtemp(prefix=".libs-", dir=self.home))
            try:
                cmd = [
                    mvn,
                    "-B",
                    "-q",
                    "-Dstyle.color=never",
                    # Maven caches "not found" in the local repo; -U retries after a
                    # transient outage instead of failing until the cache entry expires.
                    "-U",
                    f"{DEPENDENCY_PLUGIN}:copy-dependencies",
                    "-DincludeScope=runtime",
                    f"-DoutputDirectory={staging}",
                    # A repo under our cache makes a fresh machine behave like this one and
                    # keeps ~/.m2 untouched.
                    f"-Dmaven.repo.local={self.cache_dir / 'm2'}",
                    f"-Dkafka.version={self.version}",
                    "-f",
                    str(POM),
                ]
                proc = subprocess.run(
                    cmd,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    timeout=INSTALL_TIMEOUT_S,
                    check=False,
                )
                # Debian's mvn colours output even in batch mode; keep error messages readable.
                output = _ANSI.sub("", proc.stdout.decode("utf-8", "replace"))
                if proc.returncode != 0:
                    raise KafkaError(
                        f"resolving Kafka {self.version} with Maven failed (exit {proc.returncode}):\n"
                        f"$ {' '.join(cmd)}\n{output[-4000:]}"
                    )
                if not (staging / f"kafka_2.13-{self.version}.jar").exists():
                    raise KafkaError(
                        f"Maven finished but kafka_2.13-{self.version}.jar is missing in {staging}"
                    )
                # The rename is the commit point: libs/ is either absent or complete.
                staging.rename(self.libs)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            tmp_stamp = self._stamp.with_suffix(".tmp")
            tmp_stamp.write_text(self._stamp_text())
            tmp_stamp.replace(self._stamp)
            self.install_seconds = time.monotonic() - t0

    # -- run -------------------------------------------------------------------------------

    @property
    def sasl_bootstrap_servers(self) -> str:
        """The SASL_PLAINTEXT listener (mechanism PLAIN, users in ``SASL_USERS``)."""
        if self.sasl_port is None:
            raise KafkaError("broker not started")
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def bootstrap_servers(self) -> str:
        if self.port is None:
            raise KafkaError("broker not started")
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path | None:
        return self.run_dir / "broker.log" if self.run_dir else None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def rss_bytes(self) -> int | None:
        """Resident memory of the JVM, from /proc (Linux only)."""
        if not self.process:
            return None
        try:
            for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None

    def log_summary(self, tail_lines: int = 40) -> str:
        """Log path, first ERROR and tail of this broker's log (this start only)."""
        if not self.log_path:
            return "<no broker log>"
        text = _read_from(self.log_path, self._log_offset)
        return f"log: {self.log_path}\n{_summarize_log(text, tail_lines)}"

    def _properties(self, data_dir: Path) -> str:
        props = {
            "process.roles": "broker,controller",
            "node.id": str(NODE_ID),
            # Static voters rather than `format --standalone`: the same file then works for
            # 3.9 and 4.x, and there is only ever one voter.
            "controller.quorum.voters": f"{NODE_ID}@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port},"
                         f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port},SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
            # A second listener that demands a login, so the clients' SASL settings are tested for real.
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                + " ".join(f'user_{u}="{pw}"' for u, pw in SASL_USERS.items()) + ";",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": ";".join(SUPER_USERS),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "log.dirs": str(data_dir),
            # One broker: internal topics cannot have more than one replica, and one
            # partition each keeps the first transaction / group join fast on 2 cores.
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            # Tests join groups one consumer at a time; waiting 3 s for more is pure latency.
            "group.initial.rebalance.delay.ms": "0",
            # Standby take-over tests kill a leader and wait out its session: let them use short ones.
            "group.min.session.timeout.ms": "500",
            "num.network.threads": "2",
            "num.io.threads": "2",
        }
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def start(self, run_dir: Path | str) -> None:
        """Start a fresh broker whose config, data and log live in ``run_dir``; wait until ready.

        Every start is a new cluster: data from a previous run in the same directory is
        wiped, so tests never see leftovers.
        """
        if self.process and self.process.poll() is None:
            raise KafkaError(f"broker already running (pid {self.process.pid})")
        self.start_seconds = None
        self.ensure_installed()
        run_dir = Path(run_dir).resolve()
        run_dir.mkdir(parents=True, exist_ok=True)
        self.run_dir = run_dir
        self._lock_run_dir(run_dir)
        t0 = time.monotonic()
        try:
            for attempt in range(1, PORT_ATTEMPTS + 1):
                try:
                    self._start_once(run_dir)
                    break
                except _PortTaken:
                    if attempt == PORT_ATTEMPTS:
                        raise KafkaError(
                            f"broker could not bind its ports after {attempt} attempts\n{self.log_summary()}"
                        ) from None
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0

    def _lock_run_dir(self, run_dir: Path) -> None:
        # start() wipes run_dir/data; refuse if another live LocalKafka is using it.
        if self._run_lock_fd is not None:
            os.close(self._run_lock_fd)
        fd = os.open(run_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise KafkaError(f"{run_dir} is in use by another running local broker") from None
        self._run_lock_fd = fd

    def _start_once(self, run_dir: Path) -> None:
        java = _java()
        classpath = f"{self.libs}/*"  # the JVM expands the wildcard, no shell needed
        data_dir = run_dir / "data"
        shutil.rmtree(data_dir, ignore_errors=True)
        self.port, self.controller_port, self.sasl_port = _free_ports(3)
        props = run_dir / "server.properties"
        props.write_text(self._properties(data_dir))
        assert self.log_path is not None

        fmt = subprocess.run(
            [
                java,
                "-cp",
                classpath,
                "kafka.tools.StorageTool",
                "format",
                f"--cluster-id={_cluster_id()}",  # one word: an id may begin with "-" (1 in 64)
                "-c",
                str(props),
                "--ignore-formatted",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=120,
            check=False,
        )
        if fmt.returncode != 0:
            raise KafkaError(
                f"kafka-storage format failed (exit {fmt.returncode}):\n"
                f"{fmt.stdout.decode('utf-8', 'replace')[-4000:]}"
            )

        self._launch(props)

    def _launch(self, props: Path) -> None:
        """Start the JVM on an already formatted ``props`` and wait until it serves metadata."""
        java = _java()
        classpath = f"{self.libs}/*"
        assert self.log_path is not None and self.run_dir is not None
        log_path, run_dir = self.log_path, self.run_dir
        with log_path.open("ab") as log:
            self._log_offset = log.tell()
            log.write(
                f"\n=== kueuelog: starting Kafka {self.version} on {self.bootstrap_servers} ===\n".encode()
            )
            log.flush()
            self.process = subprocess.Popen(
                [
                    java,
                    f"-Xms{self.heap[0]}",
                    f"-Xmx{self.heap[1]}",
                    "-Djava.awt.headless=true",
                    *self.jvm_options,
                    # Timestamps make the log usable when a test prints its tail.
                    "-Dorg.slf4j.simpleLogger.showDateTime=true",
                    "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
                    "-cp",
                    classpath,
                    "kafka.Kafka",
                    str(props),
                ],
                cwd=run_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Own process group: Ctrl-C in a terminal reaches us, and we decide how the
                # broker stops (so the log is flushed and nothing is left half-killed).
                start_new_session=True,
                # preexec_fn is unsafe only if another thread holds a lock at fork time; it
                # calls nothing but prctl, and the test session starts the broker up front.
                # The kernel SIGTERMs the JVM if we die (tests.infra.procs); the broker must then
                # be started from the main thread (pytest's), which lives as long as it should.
                preexec_fn=die_with_parent(signal.SIGTERM),  # noqa: PLW1509
            )
        atexit.register(self.stop)
        self._wait_ready()

    def _wait_ready(self) -> None:
        assert self.process is not None and self.port is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            rc = self.process.poll()
            if rc is not None:
                assert self.log_path is not None
                if "Address already in use" in _read_from(self.log_path, self._log_offset):
                    raise _PortTaken
                raise KafkaError(
                    f"Kafka broker exited with code {rc} before becoming ready\n{self.log_summary()}"
                )
            try:
                brokers = probe_metadata("127.0.0.1", self.port, timeout=2.0)
                if any(node_id == NODE_ID for node_id, _, _ in brokers):
                    return
                last_error = KafkaError(f"metadata lists no broker {NODE_ID} yet: {brokers}")
            except (OSError, KafkaError, struct.error) as exc:
                last_error = exc
            time.sleep(0.2)  # poll interval inside the deadline loop
        raise KafkaError(
            f"Kafka broker not ready after {START_TIMEOUT_S:.0f}s (last probe: {last_error!r})\n"
            f"{self.log_summary()}"
        )

    def restart(self, *, kill: bool = False) -> None:
        """Stop the broker (SIGTERM, or SIGKILL with ``kill``) and start it again with the same
        ports and data: to clients it is the same broker coming back."""
        proc = self.process
        if proc is None or self.run_dir is None:
            raise KafkaError("restart: the broker was never started")
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        t0 = time.monotonic()
        self._launch(self.run_dir / "server.properties")
        self.start_seconds = time.monotonic() - t0

    def stop(self) -> None:
        """SIGTERM the broker, give it time for a clean shutdown, then SIGKILL. Idempotent."""
        atexit.unregister(self.stop)
        proc = self.process
        if proc is not None and proc.poll() is None:
            # The JVM leads its own group (start_new_session), so pgid == pid.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if self._run_lock_fd is not None:
            os.close(self._run_lock_fd)
            self._run_lock_fd = None


class _PortTaken(Exception):
    """The JVM lost the race for a port we picked; retry with new ones."""


# --- command line (`make kafka`) ----------------------------------------------------------


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.infra.kafka", description=__doc__.split("\n")[0])
    parser.add_argument("--version", default=None, help=f"Kafka version (default {DEFAULT_VERSION})")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install", help="fill the cache with the broker's jars and exit")
    run = sub.add_parser("run", help="run a broker until Ctrl-C / SIGTERM")
    run.add_argument("--run-dir", type=Path, default=None, help="default: <cache>/kafka-<version>/run")
    args = parser.parse_args(argv)

    kafka = LocalKafka(version=args.version)
    try:
        if not kafka.is_installed():
            print(f"installing Kafka {kafka.version} into {kafka.home} ...", file=sys.stderr, flush=True)
        kafka.ensure_installed()
        if args.command == "install":
            print(kafka.libs)
            return 0
        signal.signal(signal.SIGTERM, _raise_interrupt)
        kafka.start(args.run_dir or kafka.home / "run")
    except KafkaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        kafka.stop()
        return 130
    print(
        f"Kafka {kafka.version} ready in {kafka.start_seconds:.1f}s (pid {kafka.pid}, log {kafka.log_path});"
        " Ctrl-C to stop",
        file=sys.stderr,
        flush=True,
    )
    print(kafka.bootstrap_servers, flush=True)  # the one line on stdout, for scripts
    try:
        assert kafka.process is not None
        rc = kafka.process.wait()
        print(f"error: broker exited on its own (code {rc})\n{kafka.log_summary()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("stopping Kafka ...", file=sys.stderr, flush=True)
        return 0
    finally:
        kafka.stop()


if __name__ == "__main__":
    sys.exit(main())
