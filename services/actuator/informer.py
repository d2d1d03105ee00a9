"""Watched copies of one kind of object, for the actuator's reads (an informer, in client-go's words).

The Kubernetes port read a Workload before each admission or eviction, and listed the Jobs of the
namespace for one claiming a prebuilt Workload: at Kueue's 50 queries per second those reads were
half its calls. Kueue's manager reads from its informers' caches instead; :class:`Informer` is that
cache here. It LISTs one resource across namespaces (optionally label-selected), then WATCHes it
from the list's resourceVersion, keeping the newest copy of each object (``metadata.managedFields``
left out: nothing here reads them, and they are most of an object's size).

A copy may lag the server, and that is safe for the port: every write it makes carries the
resourceVersion of the copy it read, so a write from a stale copy is refused with 409 Conflict and
the object is read then. What the cache has not seen (created a moment ago, or before the first
list is done: :attr:`Informer.synced`) is read as before.

- not served (404: its CRD is not installed) or not granted (403): empty, and tried again every
  ``absent_retry_s``; :attr:`Informer.absent` says so meanwhile (a kind with no CRD has no objects);
- 410 Gone, a cut stream, a malformed event: listed again, after a back-off for errors.

An optional ``index`` keeps the objects by another key as well (the prebuilt Workload a job names):
:meth:`Informer.find` answers by it, the object of the smallest name first when several share one.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.actuator.kubeapi import Ref
from services.runtime.kubeclient import watch_lines

_log = structlog.get_logger(__name__)

Json = dict[str, Any]
Key = tuple[str, str]  # (namespace, name)


class _Restart(Exception):
    """List again: the watch expired (410), the stream was cut, or the server answered an error."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class InformerStats:
    lists: int = 0  # LISTs made (the first, and one after each restart)
    events: int = 0  # watch events applied
    restarts: int = 0  # watches ended by an expired resourceVersion, a cut stream, an error, an absent kind
    absent: int = 0  # lists answered 404 / 403: the kind is not served, or not granted


def resource_version_newer(a: str, b: str) -> bool:
    """Whether resourceVersion ``a`` is newer than ``b``. Kubernetes calls them opaque; every API
    server in use numbers them from etcd's revision, so they are compared as numbers when both are
    (a wrong guess costs one 409 Conflict and a read, never a wrong write), else taken as not newer."""
    return a.isdigit() and b.isdigit() and int(a) > int(b)


class Copies(Protocol):
    """Where watched copies are read from: an :class:`Informer`, or another watch kept in the same
    process (the job reconciler's)."""

    def get(self, namespace: str, name: str) -> Json | None:
        """The newest copy of ``namespace/name``; None when not seen, or not synced."""


class Informer:
    """LIST + WATCH of ``ref``'s kind in every namespace; :meth:`get` and :meth:`find` read the copies."""

    def __init__(self, api: client.ApiClient, ref: Ref, *, label_selector: str = "",
                 index: Callable[[Json], str] | None = None, watch_timeout_s: int = 300,
                 request_timeout_s: float = 30.0, absent_retry_s: float = 60.0, page_size: int = 500) -> None:
        self.ref, self.label_selector, self.index = ref, label_selector, index
        self.watch_timeout_s, self.request_timeout_s = watch_timeout_s, request_timeout_s
        self.absent_retry_s, self.page_size = absent_retry_s, page_size
        self._co = client.CustomObjectsApi(api)
        self._objects: dict[Key, Json] = {}
        self._by_index: dict[Key, dict[str, Json]] = {}  # (namespace, index value) -> name -> object
        self.synced = False
        self.absent = False
        self.stats = InformerStats()

    @property
    def what(self) -> str:
        return f"{self.ref.plural}.{self.ref.group or 'core'}"

    def __len__(self) -> int:
        return len(self._objects)

    def get(self, namespace: str, name: str) -> Json | None:
        """The newest copy seen of ``namespace/name``; None when not seen, or not synced (not
        listed yet, or stopped: then the copy may be old)."""
        return self._objects.get((namespace, name)) if self.synced else None

    def find(self, namespace: str, value: str) -> Json | None:
        """An object of ``namespace`` whose ``index`` is ``value`` (the smallest name of several)."""
        hits = self._by_index.get((namespace, value))
        return hits[min(hits)] if hits else None

    # --- keeping the copies ---

    def _put(self, obj: Json) -> None:
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            return
        meta.pop("managedFields", None)
        obj.setdefault("apiVersion", f"{self.ref.group}/{self.ref.version}" if self.ref.group else self.ref.version)
        obj.setdefault("kind", self.ref.kind)  # (list items come without either)
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        self._drop(key)
        self._objects[key] = obj
        if self.index is not None and (value := self.index(obj)):
            self._by_index.setdefault((key[0], value), {})[key[1]] = obj

    def _drop(self, key: Key) -> None:
        old = self._objects.pop(key, None)
        if old is None or self.index is None:
            return
        value = self.index(old)
        hits = self._by_index.get((key[0], value))
        if hits is not None:
            hits.pop(key[1], None)
            if not hits:
                del self._by_index[(key[0], value)]

    def _replace_all(self, items: list[Json]) -> None:
        self._objects, self._by_index = {}, {}
        for item in items:
            self._put(item)

    # --- list and watch ---

    async def run(self, stop: asyncio.Event) -> None:
        """Keep the copies until ``stop`` (a watch in progress is cut)."""
        keeping = asyncio.create_task(self._keep(), name=f"watch {self.what}")
        stopping = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({keeping, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (keeping, stopping):
                t.cancel()
            await asyncio.gather(keeping, stopping, return_exceptions=True)
            self.synced = False
        if not keeping.cancelled() and keeping.exception() is not None:
            raise keeping.exception()  # type: ignore[misc]  # (a bug: _keep only ends by cancellation)

    async def _keep(self) -> None:
        delay = 0.5
        rv: str | None = None
        while True:
            try:
                if rv is None:
                    rv = await self._list()
                    delay = 0.5
                rv = await self._watch(rv)
            except _Restart as e:
                rv = None
                self.stats.restarts += 1
                if e.status in (404, 403):  # no CRD, or not ours to read: nothing to keep for a while
                    self._absent(e)
                    wait = self.absent_retry_s
                elif e.status == 410:
                    continue
                else:
                    _log.warning("informer.restart", what=self.what, error=str(e), retry_in_s=delay)
                    wait, delay = delay, min(delay * 2, 30.0)
                await asyncio.sleep(wait)

    def _absent(self, e: _Restart) -> None:
        if not self.absent:
            _log.info("informer.absent", what=self.what, error=str(e), retry_in_s=self.absent_retry_s)
        self.stats.absent += 1
        self._replace_all([])
        self.absent, self.synced = True, True

    async def _open(self, query: dict[str, Any], timeout: aiohttp.ClientTimeout) -> Any:
        if self.label_selector:
            query["label_selector"] = self.label_selector
        ref = self.ref
        try:
            return await self._co.list_cluster_custom_object(ref.group, ref.version, ref.plural,
                                                             _preload_content=False, _request_timeout=timeout, **query)
        except ApiException as e:
            raise _Restart(f"{self.what}: HTTP {e.status} {e.reason}", status=int(e.status or 0)) from e
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            raise _Restart(f"{self.what}: {type(e).__name__}: {e}") from e

    async def _list(self) -> str:
        items: list[Json] = []
        token: str | None = None
        timeout = aiohttp.ClientTimeout(total=self.request_timeout_s)
        while True:
            query: dict[str, Any] = {"limit": self.page_size}
            if token:
                query["_continue"] = token
            resp = await self._open(query, timeout)
            try:
                if resp.status != 200:
                    raise _Restart(f"list {self.what}: HTTP {resp.status}", status=resp.status)
                page = json.loads(await resp.read())
            except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as e:
                raise _Restart(f"list {self.what}: {type(e).__name__}: {e}") from e
            finally:
                resp.release()
            items.extend(i for i in page.get("items") or [] if isinstance(i, dict))
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            if token is None:
                break
        self._replace_all(items)
        self.stats.lists += 1
        self.synced, self.absent = True, False
        return str(meta.get("resourceVersion") or "")

    async def _watch(self, rv: str) -> str:
        query: dict[str, Any] = {"watch": True, "resource_version": rv, "allow_watch_bookmarks": True,
                                 "timeout_seconds": self.watch_timeout_s}
        resp = await self._open(query, aiohttp.ClientTimeout(total=None, sock_connect=self.request_timeout_s,
                                                             sock_read=self.watch_timeout_s + 30))
        try:
            if resp.status != 200:
                raise _Restart(f"watch {self.what}: HTTP {resp.status}", status=resp.status)
            async for line in watch_lines(resp):
                rv = self._event(json.loads(line), rv)
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as e:
            raise _Restart(f"watch {self.what}: {type(e).__name__}: {e}") from e
        finally:
            resp.release()
        return rv

    def _event(self, event: Any, rv: str) -> str:
        kind = event.get("type") if isinstance(event, dict) else None
        obj = event.get("object") if isinstance(event, dict) else None
        if not isinstance(obj, dict):
            raise _Restart(f"watch {self.what}: an event without an object")
        if kind == "ERROR":
            raise _Restart(f"watch {self.what}: {obj.get('message') or obj.get('reason')}",
                           status=int(obj.get("code") or 0))
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            meta = {}
        new_rv = str(meta.get("resourceVersion") or rv)
        if kind in ("ADDED", "MODIFIED"):
            self._put(obj)
            self.stats.events += 1
        elif kind == "DELETED":
            self._drop((str(meta.get("namespace") or ""), str(meta.get("name") or "")))
            self.stats.events += 1
        return new_rv
