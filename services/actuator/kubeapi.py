"""The actuator's boundary with kubernetes-asyncio: every API call, throttled, timed, its errors wrapped once.

:class:`KubeCalls` is the only place the Kubernetes port (:mod:`services.actuator.kube_port`)
calls the API: each call waits for a token of a :class:`TokenBucket` (``qps`` / ``burst``), is
counted with its latency in :class:`ApiStats`, and whatever kubernetes-asyncio (and aiohttp
under it) raises becomes a :class:`KubeApiError`, an
:class:`~services.actuator.loop.ActuationError` that names the call and the object and carries
the HTTP status (:class:`InvalidObject` when an object read is not what it should be). The rule for ``retriable``:

- 409 Conflict (another writer got there first: re-read and try again), 429
  Too Many Requests (also "storage is (re)initializing" right after a CRD is
  established), 5xx, timeouts and connection errors: retriable;
- 404 Not Found depends on the object: a Workload or Job that does not exist
  *yet* (the job reconciler creates the Workload shortly after the Job) is
  retriable, a ResourceFlavor named by an admission that does not exist is not;
- every other 4xx (400 Bad Request, 401, 403 Forbidden, 422 Invalid, ...): not
  retriable — the same request will be refused again.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.actuator.loop import ActuationError

CONFLICT: Final = 409
NOT_FOUND: Final = 404
TOO_MANY_REQUESTS: Final = 429


class KubeApiError(ActuationError):
    """An API call failed. ``status`` is the HTTP status (None for a timeout or a broken connection)."""

    def __init__(self, message: str, *, retriable: bool, status: int | None = None, reason: str = "") -> None:
        super().__init__(message, retriable=retriable)
        self.status = status
        self.reason = reason

    @property
    def conflict(self) -> bool:
        return self.status == CONFLICT

    @property
    def not_found(self) -> bool:
        return self.status == NOT_FOUND


class InvalidObject(ActuationError):
    """An object the actuator must read is not what the API says it should be; never retriable."""

    def __init__(self, obj: str, field: str, message: str) -> None:
        super().__init__(f"{obj}: {field}: {message}", retriable=False)
        self.obj, self.field = obj, field


def status_retriable(status: int, *, not_found_retriable: bool = False) -> bool:
    """Whether a request refused with HTTP ``status`` may succeed when sent again."""
    if status == NOT_FOUND:
        return not_found_retriable
    return status in (CONFLICT, TOO_MANY_REQUESTS) or status >= 500


def _server_message(body: object) -> tuple[str, str]:
    """(reason, message) of a ``metav1.Status`` body; empty strings when the body is not one."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not isinstance(body, str) or not body:
        return "", ""
    try:
        status = json.loads(body)
    except ValueError:
        return "", body[:500]
    if not isinstance(status, dict):
        return "", body[:500]
    return str(status.get("reason") or ""), str(status.get("message") or "")


def classify(exc: BaseException, *, call: str, not_found_retriable: bool = False) -> KubeApiError | None:
    """Wrap ``exc`` raised by the API call described by ``call`` (e.g. "patch Job ns/name");
    None when it is not an API or transport error (a bug: let it propagate)."""
    if isinstance(exc, KubeApiError):
        return exc
    if isinstance(exc, ApiException):
        status = int(exc.status) if exc.status is not None else 0
        reason, message = _server_message(exc.body)
        reason = reason or str(exc.reason or "")
        text = f"{call}: HTTP {status} {reason}".rstrip()
        if message:
            text += f": {message}"
        if status == 0:  # kubernetes-asyncio raises ApiException(status=0) when it gave up on the transport
            return KubeApiError(text, retriable=True, status=None, reason=reason)
        return KubeApiError(text, retriable=status_retriable(status, not_found_retriable=not_found_retriable),
                            status=status, reason=reason)
    if isinstance(exc, asyncio.TimeoutError):  # an alias of TimeoutError since 3.11
        return KubeApiError(f"{call}: timed out", retriable=True)
    if isinstance(exc, aiohttp.ClientResponseError):
        return KubeApiError(f"{call}: HTTP {exc.status} {exc.message}", status=exc.status,
                            retriable=status_retriable(exc.status, not_found_retriable=not_found_retriable))
    if isinstance(exc, aiohttp.ClientError | ConnectionError):
        return KubeApiError(f"{call}: connection failed: {type(exc).__name__}: {exc}", retriable=True)
    return None


# --- throttling and accounting ----------------------------------------------------------------


class TokenBucket:
    """Client-side rate limit, like client-go's: ``burst`` calls at once, then ``qps`` per second.

    :meth:`reserve` takes a token now (the bucket may go into debt) and says how long to wait
    before using it, so callers queue up in order without a lock."""

    def __init__(self, qps: float, burst: int, now: float) -> None:
        if not qps > 0:
            raise ValueError(f"qps: must be greater than 0, got {qps}")
        if burst < 1:
            raise ValueError(f"burst: must be at least 1, got {burst}")
        self.qps, self.burst = float(qps), burst
        self._tokens, self._last = float(burst), now
        self.waited_at = -1e18  # when a call last had to wait for its token

    def reserve(self, now: float) -> float:
        """Take one token; returns the seconds to wait before the call may go out."""
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1.0
        if self._tokens >= 0:
            return 0.0
        self.waited_at = now
        return -self._tokens / self.qps

    def bit_within(self, seconds: float, now: float) -> bool:
        """Whether a call had to wait for its token in the last ``seconds``: the limit is what bounds the caller."""
        return now - self.waited_at < seconds


@dataclass
class ApiStats:
    """API calls made, by call ("get Workload", "patch Job status", ...), failures by status, and time."""

    calls: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)  # "409", "429", "timeout", ...
    seconds: float = 0.0  # summed latency of all calls
    max_seconds: float = 0.0
    throttled_seconds: float = 0.0  # summed wait for the rate limiter

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    @property
    def mean_seconds(self) -> float:
        return self.seconds / self.total if self.total else 0.0

    def observe(self, call: str, seconds: float, error: KubeApiError | None) -> None:
        self.calls[call] = self.calls.get(call, 0) + 1
        self.seconds += seconds
        self.max_seconds = max(self.max_seconds, seconds)
        if error is not None:
            key = str(error.status) if error.status is not None else "transport"
            self.errors[key] = self.errors.get(key, 0) + 1

    def as_dict(self) -> dict[str, Any]:
        return {"calls": dict(sorted(self.calls.items())), "total": self.total,
                "errors": dict(sorted(self.errors.items())),
                "seconds": round(self.seconds, 6), "mean_seconds": round(self.mean_seconds, 6),
                "max_seconds": round(self.max_seconds, 6), "throttled_seconds": round(self.throttled_seconds, 6)}


@dataclass(frozen=True)
class Ref:
    """Where an object lives: group/version/plural, namespace ("" when cluster-scoped) and name."""

    kind: str
    group: str
    version: str
    plural: str
    name: str
    namespace: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"


MERGE_PATCH: Final = "application/merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"


class KubeCalls:
    """GET and merge-PATCH of any object (built-in or custom) as plain JSON dicts, through
    ``CustomObjectsApi`` (its paths ``/apis/{group}/{version}/...`` serve built-in groups too)."""

    def __init__(self, api: client.ApiClient, *, qps: float, burst: int, request_timeout: float,
                 stats: ApiStats) -> None:
        self._co = client.CustomObjectsApi(api)
        self._core = client.CoreV1Api(api)
        self._bucket = TokenBucket(qps, burst, time.monotonic())
        self._timeout = request_timeout
        self.stats = stats

    def throttled(self, within: float) -> bool:
        """Whether a call waited for the rate limit in the last ``within`` seconds."""
        return self._bucket.bit_within(within, time.monotonic())

    async def get(self, ref: Ref, *, not_found_retriable: bool = False) -> dict[str, Any]:
        co = self._co
        if ref.namespace:
            fn: Callable[..., Awaitable[Any]] = co.get_namespaced_custom_object
            args: tuple[str, ...] = (ref.group, ref.version, ref.namespace, ref.plural, ref.name)
        else:
            fn, args = co.get_cluster_custom_object, (ref.group, ref.version, ref.plural, ref.name)
        return await self._call(f"get {ref.kind}", str(ref), fn, args, None, not_found_retriable)

    async def patch(self, ref: Ref, body: dict[str, Any], *, status: bool = False,
                    not_found_retriable: bool = False) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386); put ``metadata.resourceVersion`` in ``body`` to make it
        conditional (409 Conflict when the object changed since it was read)."""
        co = self._co
        if ref.namespace:
            fn: Callable[..., Awaitable[Any]] = (
                co.patch_namespaced_custom_object_status if status else co.patch_namespaced_custom_object)
            args: tuple[str, ...] = (ref.group, ref.version, ref.namespace, ref.plural, ref.name)
        else:
            fn = co.patch_cluster_custom_object_status if status else co.patch_cluster_custom_object
            args = (ref.group, ref.version, ref.plural, ref.name)
        call = f"patch {ref.kind}{' status' if status else ''}"
        return await self._call(call, str(ref), fn, args, body, not_found_retriable)

    async def json_patch(self, ref: Ref, ops: list[dict[str, Any]], *, not_found_retriable: bool = False
                         ) -> dict[str, Any]:
        """A JSON Patch (RFC 6902) of a namespaced object; a ``replace`` of ``/metadata/resourceVersion``
        among ``ops`` makes it conditional (409 Conflict when the object changed since it was read)."""
        args = (ref.group, ref.version, ref.namespace, ref.plural, ref.name)
        return await self._call(f"patch {ref.kind}", str(ref), self._co.patch_namespaced_custom_object, args, ops,
                                not_found_retriable, content_type=JSON_PATCH)

    async def create(self, ref: Ref, body: dict[str, Any]) -> bool:
        """Create a namespaced object (a PodTemplate in the core group, else a custom object);
        False when one of that name exists already (409 AlreadyExists: created before)."""
        if ref.group:
            fn: Callable[..., Awaitable[Any]] = self._co.create_namespaced_custom_object
            args: tuple[Any, ...] = (ref.group, ref.version, ref.namespace, ref.plural, body)
        else:
            fn, args = self._core.create_namespaced_pod_template, (ref.namespace, body)
        try:
            await self._plain(f"create {ref.kind}", str(ref), fn, args)
        except KubeApiError as e:
            if e.status == 409:
                return False
            raise
        return True

    async def delete(self, ref: Ref, *, propagation: str = "") -> None:
        """Delete a namespaced object; one that is gone already is fine. ``propagation``: the
        propagationPolicy (``Background`` for a Job, whose API default orphans its pods)."""
        if ref.group:
            fn: Callable[..., Awaitable[Any]] = self._co.delete_namespaced_custom_object
            args: tuple[Any, ...] = (ref.group, ref.version, ref.namespace, ref.plural, ref.name)
        else:
            fn, args = self._core.delete_namespaced_pod_template, (ref.name, ref.namespace)
        extra = {"propagation_policy": propagation} if propagation else {}
        try:
            await self._plain(f"delete {ref.kind}", str(ref), fn, args, **extra)
        except KubeApiError as e:
            if e.status != 404:
                raise

    async def list_objects(self, ref: Ref, *, label_selector: str = "") -> list[dict[str, Any]]:
        """The custom objects of ``ref``'s kind in its namespace (``ref.name`` is not used)."""
        out = await self._plain(f"list {ref.kind}", f"{ref.namespace}/{ref.plural}",
                                self._co.list_namespaced_custom_object,
                                (ref.group, ref.version, ref.namespace, ref.plural), label_selector=label_selector)
        items = out.get("items") if isinstance(out, dict) else None
        return [i for i in items or [] if isinstance(i, dict)]

    async def _plain(self, call: str, what: str, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...],
                     **extra: Any) -> Any:
        wait = self._bucket.reserve(time.monotonic())
        if wait > 0:
            self.stats.throttled_seconds += wait
            await asyncio.sleep(wait)
        started = time.monotonic()
        try:
            out = await fn(*args, _request_timeout=self._timeout, **extra)
        except Exception as e:
            wrapped = classify(e, call=f"{call.split(' ', 1)[0]} {what}")
            self.stats.observe(call, time.monotonic() - started, wrapped)
            if wrapped is None:
                raise
            raise wrapped from e
        self.stats.observe(call, time.monotonic() - started, None)
        return out

    async def _call(self, call: str, what: str, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...],
                    body: dict[str, Any] | list[dict[str, Any]] | None, not_found_retriable: bool, *,
                    content_type: str = "") -> dict[str, Any]:
        wait = self._bucket.reserve(time.monotonic())
        if wait > 0:
            self.stats.throttled_seconds += wait
            await asyncio.sleep(wait)
        kwargs: dict[str, Any] = {"_request_timeout": self._timeout}
        if body is not None:
            kwargs["_content_type"] = content_type or MERGE_PATCH
            args = (*args, body)
        started = time.monotonic()
        try:
            out = await fn(*args, **kwargs)
        except Exception as e:
            wrapped = classify(e, call=f"{call.split(' ', 1)[0]} {what}", not_found_retriable=not_found_retriable)
            self.stats.observe(call, time.monotonic() - started, wrapped)
            if wrapped is None:
                raise
            raise wrapped from e
        self.stats.observe(call, time.monotonic() - started, None)
        if not isinstance(out, dict):
            raise KubeApiError(f"{call} {what}: the API server answered with {type(out).__name__}, not an object",
                               retriable=False)
        return out
