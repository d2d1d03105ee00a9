"""The Kubernetes client configuration: a kubeconfig file, else the pod's in-cluster one.

Anything wrong with either is a :class:`KubeConfigError` that says what to give instead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
from kubernetes_asyncio import client, config
from kubernetes_asyncio.config import ConfigException


class KubeConfigError(Exception):
    """No usable Kubernetes client configuration; the message says what was tried."""


async def client_configuration(kubeconfig: str | None, *, context: str | None = None) -> client.Configuration:
    """The configuration of ``kubeconfig`` (a path, or several joined by ':' as in KUBECONFIG),
    else the pod's in-cluster configuration."""
    cfg = client.Configuration()
    if kubeconfig:
        try:
            await config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg,
                                          persist_config=False)
        except (ConfigException, OSError, ValueError, KeyError, TypeError) as e:
            raise KubeConfigError(f"kubeconfig {kubeconfig}: {e}") from e
        return cfg
    try:
        config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    except ConfigException as e:
        raise KubeConfigError(
            f"no Kubernetes configuration: give --kubeconfig PATH (or set KUEUELOG_KUBECONFIG or KUBECONFIG), "
            f"or run in a pod with a ServiceAccount token (in-cluster configuration: {e})") from e
    return cfg


def api_client(cfg: client.Configuration, *, impersonate: str | None = None) -> client.ApiClient:
    """An ApiClient on the running loop; ``impersonate`` sends every request as that user (the
    caller's credentials must be allowed to impersonate it)."""
    if impersonate:
        return client.ApiClient(configuration=cfg, header_name="Impersonate-User", header_value=impersonate)
    return client.ApiClient(configuration=cfg)


async def watch_lines(resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """A watch stream's newline-separated JSON documents (a last one without its newline too),
    whatever their size: aiohttp's readline refuses lines over 128 KiB, and a Workload with a
    large pod template can be longer."""
    buf = bytearray()
    async for chunk in resp.content.iter_any():
        buf += chunk
        while (end := buf.find(b"\n")) >= 0:
            line = bytes(buf[:end])
            del buf[: end + 1]
            if line.strip():
                yield line
    if buf.strip():
        yield bytes(buf)
