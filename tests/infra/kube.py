"""A real, local Kubernetes control plane (etcd + kube-apiserver) for tests and `make cluster`.

This is the envtest approach: only etcd and kube-apiserver run, with no kubelet, scheduler
or controller-manager. That is all a Kueue-compatible scheduler needs to talk to (CRDs,
Jobs, watches), and it fits a 2-core machine. Consequences worth knowing: Jobs never get
pods and namespaces never finish deleting, so tests use a namespace each and play the
kubelet's part themselves by patching status.

This module owns the whole life cycle, using only the standard library:

* building: both servers are compiled from the Go module proxy through our own wrapper
  modules in ``deploy/controlplane/{apiserver,etcd}`` (their go.mod/go.sum pin every
  version). Binaries land in
  ``${KUEUELOG_CACHE:-$HOME/.cache/kueuelog}/controlplane-<k8s>-<etcd>/bin``, guarded by a
  stamp over the versions, the Go version and the wrapper sources, and swapped in
  atomically. Go's own caches live under ``<cache>/go`` so a fresh CI clone reuses them.
  A cold build takes 10-20+ minutes on 2 cores; progress lines keep CI logs alive.
* running: free ports on 127.0.0.1, each server in its own process group with its output
  in ``<run_dir>/<name>.log``; a static admin bearer token (``system:masters``) and the
  apiserver's self-signed CA in a kubeconfig.
* readiness: etcd ``/health``; apiserver ``/readyz`` and then namespace ``default``.
* stopping: SIGTERM then SIGKILL, also at interpreter exit; on Linux the kernel SIGKILLs
  both if this process dies without running exit handlers.

``python -m tests.infra.kube run`` starts a control plane and blocks until Ctrl-C /
SIGTERM; ``python -m tests.infra.kube build`` only fills the cache.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import fcntl
import hashlib
import json
import math
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from base64 import b64encode
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType

from tests.infra.procs import die_with_parent

REPO_ROOT = Path(__file__).resolve().parents[2]
SRC_DIR = REPO_ROOT / "deploy" / "controlplane"
APISERVER_SRC = SRC_DIR / "apiserver"
ETCD_SRC = SRC_DIR / "etcd"

# Bump when the build recipe (flags, ldflags) changes, so cached binaries are rebuilt.
BUILD_RECIPE = "3"
BUILD_TIMEOUT_S = 60 * 60.0
HEARTBEAT_S = 30.0
ETCD_START_TIMEOUT_S = 60.0
APISERVER_START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 20.0
# A port picked free can be taken by someone else before the server binds it; a few
# fresh attempts turn that race into a non-event instead of a flaky session.
PORT_ATTEMPTS = 3
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"


class KubeError(RuntimeError):
    """Building, starting or probing the local control plane failed."""


def cache_root() -> Path:
    """Where builds live: outside the clone, so a fresh CI clone reuses them."""
    env = os.environ.get("KUEUELOG_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "kueuelog"


def _required_version(gomod: Path, module: str) -> str:
    """The version ``gomod`` requires of ``module`` (single-line or block form)."""
    pattern = re.compile(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", re.MULTILINE)
    match = pattern.search(gomod.read_text())
    if not match:
        raise KubeError(f"{gomod} does not require {module}")
    return match.group(1)


def _go() -> str:
    found = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if not found:
        raise KubeError("go not found on PATH or in /usr/local/go/bin (needed to build the control plane)")
    return found


@contextlib.contextmanager
def _flock(path: Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``path``: one build per cache at a time.

    ``on_wait`` is called once if someone else holds it, so a second session says why it
    sits silent while the first one builds.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(path: Path | None, lines: int) -> str:
    if path is None or not path.exists():
        return "(no log)"
    with path.open("rb") as fh:
        fh.seek(0, os.SEEK_END)
        fh.seek(max(0, fh.tell() - 64 * 1024))
        text = fh.read().decode(errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def rss_bytes(pid: int) -> int | None:
    """Resident set size of ``pid`` from /proc, or None where /proc is not there."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


# --- service-account key ------------------------------------------------------------------


def write_rsa_key(path: Path) -> None:
    """Write a 2048-bit RSA private key (PEM) for signing service-account tokens.

    kube-apiserver refuses to start without one. openssl is on nearly every machine and
    is used when present; the fallback is a plain-Python key generation, since the
    standard library has no RSA. The key only signs tokens on a throwaway test cluster.
    """
    openssl = shutil.which("openssl")
    if openssl:
        subprocess.run(
            [openssl, "genrsa", "-out", str(path), "2048"],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
    else:
        path.write_bytes(_python_rsa_pem(2048))
    path.chmod(0o600)


_SMALL_PRIMES = [p for p in range(3, 2000) if all(p % d for d in range(2, math.isqrt(p) + 1))]


def _probable_prime(candidate: int, rounds: int = 40) -> bool:
    if any(candidate % p == 0 for p in _SMALL_PRIMES):
        return candidate in _SMALL_PRIMES
    d, r = candidate - 1, 0
    while d % 2 == 0:
        d, r = d // 2, r + 1
    for _ in range(rounds):
        x = pow(secrets.randbelow(candidate - 3) + 2, d, candidate)
        if x in (1, candidate - 1):
            continue
        for _ in range(r - 1):
            x = pow(x, 2, candidate)
            if x == candidate - 1:
                break
        else:
            return False
    return True


def _random_prime(bits: int, e: int) -> int:
    while True:
        # Top two bits set so p*q has exactly 2*bits bits; odd.
        candidate = secrets.randbits(bits) | (3 << (bits - 2)) | 1
        if math.gcd(candidate - 1, e) == 1 and _probable_prime(candidate):
            return candidate


def _der_len(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(raw)]) + raw


def _der_int(value: int) -> bytes:
    raw = value.to_bytes(value.bit_length() // 8 + 1, "big")  # +1 keeps the sign bit clear
    return b"\x02" + _der_len(len(raw)) + raw


def _python_rsa_pem(bits: int) -> bytes:
    e = 65537
    while True:
        p, q = _random_prime(bits // 2, e), _random_prime(bits // 2, e)
        if p != q:
            break
    n, phi = p * q, (p - 1) * (q - 1)
    d = pow(e, -1, phi)
    fields = [0, n, e, d, p, q, d % (p - 1), d % (q - 1), pow(q, -1, p)]  # PKCS#1 RSAPrivateKey
    body = b"".join(_der_int(f) for f in fields)
    der = b"\x30" + _der_len(len(body)) + body
    b64 = b64encode(der).decode()
    lines = [b64[i : i + 64] for i in range(0, len(b64), 64)]
    return ("-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(lines) + "\n-----END RSA PRIVATE KEY-----\n").encode()


# --- the control plane --------------------------------------------------------------------


class _PortTaken(Exception):
    pass


class LocalControlPlane:
    """etcd + kube-apiserver on 127.0.0.1, built from source on first use and cached."""

    def __init__(self, cache_dir: Path | None = None, log: Callable[[str], None] | None = None,
                 apiserver_args: Sequence[str] = ()) -> None:
        """``apiserver_args``: further kube-apiserver flags (bench/kube.py: Kueue's harness's request limits)."""
        self.cache_dir = cache_dir or cache_root()
        self.apiserver_args = tuple(apiserver_args)
        self.kubernetes_version = _required_version(APISERVER_SRC / "go.mod", "k8s.io/kubernetes")
        self.etcd_version = _required_version(ETCD_SRC / "go.mod", "go.etcd.io/etcd/server/v3")
        self.home = self.cache_dir / f"controlplane-{self.kubernetes_version}-{self.etcd_version}"
        self._log_fn = log
        self.run_dir: Path | None = None
        self._own_run_dir = False
        self.etcd: subprocess.Popen[bytes] | None = None
        self.apiserver: subprocess.Popen[bytes] | None = None
        self.etcd_port: int | None = None
        self.apiserver_port: int | None = None
        self._token: str | None = None
        self.start_seconds: float | None = None
        self.build_seconds: float | None = None

    # -- paths and properties --

    @property
    def bin_dir(self) -> Path:
        return self.home / "bin"

    @property
    def apiserver_bin(self) -> Path:
        return self.bin_dir / "kube-apiserver"

    @property
    def etcd_bin(self) -> Path:
        return self.bin_dir / "etcd"

    @property
    def apiserver_pid(self) -> int | None:
        return self.apiserver.pid if self.apiserver is not None else None

    @property
    def etcd_pid(self) -> int | None:
        return self.etcd.pid if self.etcd is not None else None

    @property
    def server(self) -> str:
        if self.apiserver_port is None:
            raise KubeError("control plane not started")
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def token(self) -> str:
        if self._token is None:
            raise KubeError("control plane not started")
        return self._token

    @property
    def ca_path(self) -> Path:
        return self._run_dir() / "ca.crt"

    @property
    def kubeconfig_path(self) -> Path:
        return self._run_dir() / "kubeconfig"

    @property
    def etcd_log_path(self) -> Path | None:
        return self.run_dir / "etcd.log" if self.run_dir else None

    @property
    def apiserver_log_path(self) -> Path | None:
        return self.run_dir / "kube-apiserver.log" if self.run_dir else None

    def _run_dir(self) -> Path:
        if self.run_dir is None:
            raise KubeError("control plane not started")
        return self.run_dir

    def _log(self, message: str) -> None:
        line = f"[kube] {message}"
        if self._log_fn is not None:
            self._log_fn(line)
        else:
            print(line, file=sys.stderr, flush=True)

    def log_tails(self, lines: int = 40) -> str:
        return (
            f"--- etcd ({self.etcd_log_path}) ---\n{_tail(self.etcd_log_path, lines)}\n"
            f"--- kube-apiserver ({self.apiserver_log_path}) ---\n{_tail(self.apiserver_log_path, lines)}"
        )

    def memory(self) -> dict[str, int | None]:
        """RSS in bytes of each running server (None when not running)."""
        return {
            "etcd": rss_bytes(self.etcd.pid) if self.etcd and self.etcd.poll() is None else None,
            "kube-apiserver": rss_bytes(self.apiserver.pid)
            if self.apiserver and self.apiserver.poll() is None
            else None,
        }

    # -- building --

    def _go_env(self) -> dict[str, str]:
        go_root = self.cache_dir / "go"
        env = dict(os.environ)
        env.update(
            # Never let go.mod's toolchain line trigger a toolchain download: only the
            # module proxy is reachable, and the installed Go is new enough.
            GOTOOLCHAIN="local",
            CGO_ENABLED="0",
            GOPATH=str(go_root / "path"),
            GOMODCACHE=str(go_root / "mod"),
            GOCACHE=str(go_root / "build"),
            # readonly: build exactly what the committed go.mod/go.sum pin, never edit them.
            GOFLAGS="-mod=readonly -buildvcs=false",
        )
        return env

    def _stamp(self, go: str) -> str:
        """Key over everything that changes the binaries; a mismatch means rebuild."""
        digest = hashlib.sha256()
        go_version = subprocess.run(
            [go, "env", "GOVERSION"], env=self._go_env(), capture_output=True, text=True, check=True
        ).stdout.strip()
        for part in (BUILD_RECIPE, self.kubernetes_version, self.etcd_version, go_version):
            digest.update(part.encode() + b"\0")
        for src in (APISERVER_SRC, ETCD_SRC):
            for name in ("go.mod", "go.sum", "main.go"):
                digest.update(name.encode() + b"\0" + (src / name).read_bytes() + b"\0")
        return digest.hexdigest()

    def is_built(self) -> bool:
        stamp = self.home / "stamp"
        return (
            stamp.exists()
            and self.apiserver_bin.exists()
            and self.etcd_bin.exists()
            and stamp.read_text().strip() == self._stamp(_go())
        )

    def ensure_built(self) -> Path:
        """Build both binaries unless the cached ones match the pinned sources. Returns bin dir."""
        go = _go()
        lock = self.cache_dir / "controlplane.lock"
        with _flock(lock, on_wait=lambda: self._log(f"waiting for another build to release {lock}")):
            stamp = self._stamp(go)
            stamp_file = self.home / "stamp"
            if (
                stamp_file.exists()
                and stamp_file.read_text().strip() == stamp
                and self.apiserver_bin.exists()
                and self.etcd_bin.exists()
            ):
                return self.bin_dir
            started = time.monotonic()
            self._log(
                f"building kube-apiserver {self.kubernetes_version} and etcd {self.etcd_version} into "
                f"{self.home} (cold: 10-20+ min on 2 cores; Go caches in {self.cache_dir / 'go'})"
            )
            tmp = Path(tempfile.mkdtemp(prefix=f".{self.home.name}.tmp-", dir=self.cache_dir))
            tmp.chmod(0o755)  # mkdtemp makes it private; the cache is shared by users of the box
            try:
                (tmp / "bin").mkdir()
                # Build logs sit beside the cache entries, not inside the temp dir, so a
                # failed build's full log survives for inspection.
                logs = self.cache_dir / "build-logs"
                logs.mkdir(exist_ok=True)
                self._go_build(
                    go,
                    ETCD_SRC,
                    tmp / "bin" / "etcd",
                    self._etcd_ldflags(),
                    logs / f"{self.home.name}-etcd.log",
                )
                self._go_build(
                    go,
                    APISERVER_SRC,
                    tmp / "bin" / "kube-apiserver",
                    self._apiserver_ldflags(go),
                    logs / f"{self.home.name}-kube-apiserver.log",
                )
                (tmp / "stamp").write_text(stamp + "\n")
                # Swap the finished directory in whole: a reader never sees half a build.
                old = None
                if self.home.exists():
                    old = self.cache_dir / f".{self.home.name}.old-{os.getpid()}"
                    self.home.rename(old)
                tmp.rename(self.home)
                if old is not None:
                    shutil.rmtree(old, ignore_errors=True)
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
            self.build_seconds = time.monotonic() - started
            self._log(f"built control plane in {self.build_seconds:.0f}s")
            return self.bin_dir

    def _module_time(self, go: str, src: Path, module: str) -> str:
        """The release time the module proxy records for ``module``: a reproducible buildDate."""
        out = subprocess.run(
            [go, "list", "-m", "-json", module],
            check=False,
            cwd=src,
            env=self._go_env(),
            capture_output=True,
            text=True,
        )
        if out.returncode == 0:
            with contextlib.suppress(ValueError):
                return str(json.loads(out.stdout).get("Time", "")) or "1970-01-01T00:00:00Z"
        return "1970-01-01T00:00:00Z"

    def _apiserver_ldflags(self, go: str) -> str:
        match = re.match(r"v(\d+)\.(\d+)\.", self.kubernetes_version)
        major, minor = match.groups() if match else ("", "")
        pkg = "k8s.io/component-base/version"
        # Without gitVersion, /version says v0.0.0-master and the apiserver's emulation
        # version logic works from a bogus binary version. -s -w as upstream release builds.
        return " ".join(
            [
                "-s",
                "-w",
                f"-X {pkg}.gitVersion={self.kubernetes_version}",
                f"-X {pkg}.gitMajor={major}",
                f"-X {pkg}.gitMinor={minor}",
                f"-X {pkg}.gitTreeState=clean",
                f"-X {pkg}.gitCommit=",
                f"-X {pkg}.buildDate={self._module_time(go, APISERVER_SRC, 'k8s.io/kubernetes')}",
            ]
        )

    def _etcd_ldflags(self) -> str:
        return "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-proxy"

    def _go_build(self, go: str, src: Path, out: Path, ldflags: str, log_path: Path) -> None:
        name = out.name
        cmd = [go, "build", "-trimpath", "-v", "-ldflags", ldflags, "-o", str(out), "."]
        self._log(f"go build {name} (log {log_path})")
        started = time.monotonic()
        counts = {"downloaded": 0, "compiled": 0}
        with log_path.open("wb") as log:
            proc = subprocess.Popen(cmd, cwd=src, env=self._go_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            assert proc.stdout is not None
            stdout = proc.stdout

            def pump() -> None:
                # -v prints each package as it compiles: counting lines gives a cheap
                # progress measure without flooding the CI log with ~2000 names.
                for line in stdout:
                    log.write(line)
                    if line.startswith(b"go: downloading"):
                        counts["downloaded"] += 1
                    else:
                        counts["compiled"] += 1
                log.flush()

            reader = threading.Thread(target=pump, daemon=True)
            reader.start()
            try:
                while True:
                    try:
                        rc = proc.wait(timeout=HEARTBEAT_S)
                        break
                    except subprocess.TimeoutExpired:
                        elapsed = time.monotonic() - started
                        if elapsed > BUILD_TIMEOUT_S:
                            proc.kill()
                            proc.wait()
                            raise KubeError(f"go build {name} took over {BUILD_TIMEOUT_S:.0f}s") from None
                        self._log(
                            f"  ... {name}: {elapsed / 60:.1f} min, {counts['downloaded']} modules "
                            f"downloaded, {counts['compiled']} packages compiled"
                        )
            except BaseException:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                reader.join(timeout=10)
                raise
            reader.join()
        if rc != 0:
            raise KubeError(f"go build {name} failed (exit {rc}):\n{_tail(log_path, 40)}")
        size = out.stat().st_size / 2**20
        self._log(f"  built {name} in {time.monotonic() - started:.0f}s ({size:.0f} MiB)")

    # -- running --

    def start(self, run_dir: Path | None = None) -> None:
        """Start etcd then kube-apiserver, wait until both are ready, write the kubeconfig.

        ``run_dir`` holds data, certificates, logs and the kubeconfig; without one a temp
        dir is used and removed again by :meth:`stop`.
        """
        if self.apiserver is not None or self.etcd is not None:
            raise KubeError("control plane already started")
        if not (self.apiserver_bin.exists() and self.etcd_bin.exists()):
            raise KubeError(f"binaries missing in {self.bin_dir}: call ensure_built() first")
        started = time.monotonic()
        if run_dir is None:
            run_dir = Path(tempfile.mkdtemp(prefix="kueuelog-kube-"))
            self._own_run_dir = True
        run_dir.mkdir(parents=True, exist_ok=True)
        self.run_dir = run_dir.resolve()
        atexit.register(self.stop)
        try:
            self._start_etcd()
            self._prepare_auth()
            self._start_apiserver()
            self._write_kubeconfig()
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started

    def _spawn(self, args: list[str], log_path: Path) -> subprocess.Popen[bytes]:
        with log_path.open("ab") as log:
            log.write(f"\n=== {time.strftime('%H:%M:%S')} {' '.join(args)}\n".encode())
            log.flush()
            return subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self._run_dir(),
                # Own process group, so stop() can signal the server and anything it forks,
                # and a Ctrl-C in the terminal reaches us first (we then stop it cleanly).
                start_new_session=True,
                # SIGKILL, not SIGTERM: the orphaned apiserver's graceful shutdown hangs once etcd is gone too.
                preexec_fn=die_with_parent(signal.SIGKILL),  # noqa: PLW1509 -- see tests.infra.procs
            )

    def _start_etcd(self) -> None:
        run_dir = self._run_dir()
        log_path = run_dir / "etcd.log"
        for attempt in range(PORT_ATTEMPTS):
            client, peer = free_port(), free_port()
            args = [
                str(self.etcd_bin),
                "--name=kueuelog",
                f"--data-dir={run_dir / 'etcd-data'}",
                f"--listen-client-urls=http://127.0.0.1:{client}",
                f"--advertise-client-urls=http://127.0.0.1:{client}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                # Default initial cluster points at :2380, which would not match our peer URL.
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=kueuelog=http://127.0.0.1:{peer}",
                # Tests do not need durability; fsync dominates etcd latency on CI disks.
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ]
            self.etcd = self._spawn(args, log_path)
            self.etcd_port = client
            try:
                self._wait_etcd()
                return
            except _PortTaken:
                self._log(f"etcd port {client}/{peer} was taken, retrying ({attempt + 1}/{PORT_ATTEMPTS})")
                shutil.rmtree(run_dir / "etcd-data", ignore_errors=True)
        raise KubeError("etcd could not bind a free port")

    def _wait_etcd(self) -> None:
        assert self.etcd is not None
        deadline = time.monotonic() + ETCD_START_TIMEOUT_S
        url = f"http://127.0.0.1:{self.etcd_port}/health"
        last: object = None
        while time.monotonic() < deadline:
            if self.etcd.poll() is not None:
                tail = _tail(self.etcd_log_path, 30)
                if "address already in use" in tail:
                    raise _PortTaken
                raise KubeError(f"etcd exited with {self.etcd.returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    body = json.loads(resp.read())
                    if body.get("health") == "true":
                        return
                    last = body
            except (OSError, ValueError) as exc:
                last = exc
            time.sleep(0.1)
        raise KubeError(
            f"etcd not healthy after {ETCD_START_TIMEOUT_S:.0f}s (last: {last}):\n{_tail(self.etcd_log_path, 30)}"
        )

    def _prepare_auth(self) -> None:
        run_dir = self._run_dir()
        key = run_dir / "sa.key"
        if not key.exists():
            write_rsa_key(key)
        self._token = secrets.token_hex(24)
        tokens = run_dir / "tokens.csv"
        # token,user,uid,"groups": system:masters bypasses RBAC entirely.
        tokens.write_text(f'{self._token},admin,admin,"system:masters"\n')
        tokens.chmod(0o600)

    def _start_apiserver(self) -> None:
        """First start: a fresh free port, retried if someone grabs it before we bind."""
        for attempt in range(PORT_ATTEMPTS):
            self.apiserver_port = free_port()
            self._spawn_apiserver()
            try:
                self._wait_apiserver()
                return
            except _PortTaken:
                self._log(f"apiserver port {self.apiserver_port} was taken, retrying ({attempt + 1}/{PORT_ATTEMPTS})")
        raise KubeError("kube-apiserver could not bind a free port")

    def _spawn_apiserver(self) -> None:
        run_dir = self._run_dir()
        port = self.apiserver_port
        args = [
            str(self.apiserver_bin),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            # Self-signed serving cert + CA are generated here on first start and reused
            # on restart, so a kubeconfig stays valid across restart_apiserver().
            f"--cert-dir={run_dir / 'apiserver-certs'}",
            f"--secure-port={port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--allow-privileged=true",
            # No controller-manager creates service accounts' tokens, so this plugin
            # would reject every pod.
            "--disable-admission-plugins=ServiceAccount",
            "--authorization-mode=RBAC",
            f"--token-auth-file={run_dir / 'tokens.csv'}",
            f"--service-account-issuer=https://127.0.0.1:{port}/",
            f"--service-account-key-file={run_dir / 'sa.key'}",
            f"--service-account-signing-key-file={run_dir / 'sa.key'}",
            # On SIGTERM, end open watches cleanly (clients see the stream end) instead of
            # letting them hold the HTTP server's graceful shutdown open for up to 60s.
            "--shutdown-watch-termination-grace-period=2s",
            *self.apiserver_args,
        ]
        self.apiserver = self._spawn(args, run_dir / "kube-apiserver.log")

    def _ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_path))

    def _refresh_ca(self) -> bool:
        """Copy the apiserver's generated CA out of its cert-dir; False until it exists.

        apiserver.crt holds the serving certificate followed by the CA that signed it; the
        CA alone is what clients should trust.
        """
        crt = self._run_dir() / "apiserver-certs" / "apiserver.crt"
        if not crt.exists():
            return False
        blocks = re.findall(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", crt.read_text(), re.DOTALL)
        if not blocks:
            return False  # still being written
        self.ca_path.write_text(blocks[-1] + "\n")
        return True

    def _get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        req = urllib.request.Request(self.server + path, headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self._ssl_context()) as resp:
                return int(resp.status), resp.read()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read()

    def _wait_apiserver(self) -> None:
        assert self.apiserver is not None
        deadline = time.monotonic() + APISERVER_START_TIMEOUT_S
        last: object = None
        stage = "certificates"
        while time.monotonic() < deadline:
            if self.apiserver.poll() is not None:
                tail = _tail(self.apiserver_log_path, 40)
                if "address already in use" in tail:
                    raise _PortTaken
                raise KubeError(f"kube-apiserver exited with {self.apiserver.returncode}:\n{tail}")
            try:
                if stage == "certificates" and self._refresh_ca():
                    stage = "readyz"
                if stage == "readyz":
                    status, body = self._get("/readyz")
                    last = (status, body[-300:])
                    if status == 200:
                        stage = "default namespace"
                if stage == "default namespace":
                    # The apiserver creates it itself, shortly after /readyz turns green.
                    status, body = self._get("/api/v1/namespaces/default")
                    last = (status, body[-300:])
                    if status == 200:
                        return
            except (OSError, ssl.SSLError) as exc:
                last = exc
            time.sleep(0.2)
        raise KubeError(
            f"kube-apiserver not ready after {APISERVER_START_TIMEOUT_S:.0f}s waiting for {stage} "
            f"(last: {last}):\n{_tail(self.apiserver_log_path, 40)}"
        )

    def _write_kubeconfig(self) -> None:
        q = json.dumps  # JSON strings are valid YAML scalars: no quoting surprises.
        text = f"""apiVersion: v1
kind: Config
clusters:
- name: kueuelog-local
  cluster:
    server: {q(self.server)}
    certificate-authority: {q(str(self.ca_path))}
users:
- name: admin
  user:
    token: {q(self.token)}
contexts:
- name: kueuelog-local
  context:
    cluster: kueuelog-local
    user: admin
    namespace: default
current-context: kueuelog-local
"""
        tmp = self.kubeconfig_path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.chmod(0o600)
        tmp.rename(self.kubeconfig_path)

    @staticmethod
    def _terminate(proc: subprocess.Popen[bytes] | None, timeout: float = STOP_TIMEOUT_S) -> None:
        if proc is None or proc.poll() is not None:
            return
        # Each server leads its own group (start_new_session), so pgid == pid.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def _kill_apiserver(self, grace_s: float) -> None:
        if self.apiserver is None:
            raise KubeError("control plane not started")
        if grace_s <= 0:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.apiserver.pid, signal.SIGKILL)
            self.apiserver.wait()
        else:
            self._terminate(self.apiserver, grace_s)

    def _wait_restarted(self) -> None:
        try:
            self._wait_apiserver()
        except _PortTaken:
            raise KubeError(f"apiserver port {self.apiserver_port} was taken while restarting") from None

    def restart_apiserver(self, *, grace_s: float = 10.0) -> None:
        """Stop kube-apiserver and start it again on the same port; etcd keeps running.

        Clients see their connections (and watches) drop, then the same URL, CA and token
        work again. ``grace_s`` bounds the graceful shutdown (open watches can hold it up)
        before SIGKILL; 0 kills at once, like a crash. Blocks for a few seconds: from a
        coroutine use :meth:`restart_apiserver_async`, not ``asyncio.to_thread``.
        """
        self._kill_apiserver(grace_s)
        self._spawn_apiserver()
        self._wait_restarted()

    async def restart_apiserver_async(self, *, grace_s: float = 10.0) -> None:
        """:meth:`restart_apiserver` without blocking the event loop.

        The waiting happens in worker threads, but the new process is spawned from the
        loop's own thread: a child spawned from a short-lived worker thread could not get
        the parent-death signal (it fires when the forking *thread* exits).
        """
        await asyncio.to_thread(self._kill_apiserver, grace_s)
        self._spawn_apiserver()
        await asyncio.to_thread(self._wait_restarted)

    def stop(self) -> None:
        """SIGTERM both servers (apiserver first), SIGKILL after a grace period. Idempotent."""
        atexit.unregister(self.stop)
        self._terminate(self.apiserver)
        self._terminate(self.etcd)
        self.apiserver = self.etcd = None
        if self._own_run_dir and self.run_dir is not None:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            self._own_run_dir = False

    def __enter__(self) -> LocalControlPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.infra.kube", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build kube-apiserver and etcd into the cache, print the bin dir")
    run = sub.add_parser("run", help="run a control plane until Ctrl-C / SIGTERM")
    run.add_argument("--run-dir", type=Path, default=None, help="default: <cache>/controlplane-<versions>/run")
    args = parser.parse_args(argv)

    cp = LocalControlPlane()
    try:
        cp.ensure_built()
        if args.command == "build":
            print(cp.bin_dir)
            return 0
        signal.signal(signal.SIGTERM, _raise_interrupt)
        run_dir = args.run_dir or cp.home / "run"
        # A fresh cluster each time: stale etcd data from an earlier run would carry its
        # objects (and a certificate for another port) over.
        shutil.rmtree(run_dir, ignore_errors=True)
        cp.start(run_dir)
    except KubeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        cp.stop()
        return 130
    mem = {k: f"{v / 2**20:.0f} MiB" if v else "?" for k, v in cp.memory().items()}
    print(
        f"Kubernetes {cp.kubernetes_version} (etcd {cp.etcd_version}) ready in {cp.start_seconds:.1f}s "
        f"at {cp.server}; RSS {mem}; logs in {cp.run_dir}. Ctrl-C to stop.",
        file=sys.stderr,
        flush=True,
    )
    print(f"export KUBECONFIG={cp.kubeconfig_path}", flush=True)
    try:
        while True:
            time.sleep(1)
            for name, proc in (("etcd", cp.etcd), ("kube-apiserver", cp.apiserver)):
                if proc is not None and proc.poll() is not None:
                    print(f"error: {name} exited with {proc.returncode}:\n{cp.log_tails()}", file=sys.stderr)
                    cp.stop()
                    return 1
    except KeyboardInterrupt:
        pass
    finally:
        cp.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
