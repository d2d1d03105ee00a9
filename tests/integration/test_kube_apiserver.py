"""The local control plane is a real Kubernetes API: the things kueuelog relies on work.

These tests prove the infrastructure (tests/infra/kube.py) rather than kueuelog itself:
the built version is served, batch/v1 Jobs round-trip including a suspend patch, and a
CRD becomes Established and streams its objects (and status-subresource updates) through
a watch, all through kubernetes-asyncio as kueuelog uses it. Every wait is a deadline poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from tests.infra.kube import LocalControlPlane
from tests.infra.pytest_kube import open_api_client
from tests.integration.kube_deploy import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

GROUP = "test.kueuelog.io"
VERSION = "v1"
PLURAL = "widgets"
CRD_NAME = f"{PLURAL}.{GROUP}"




async def test_version_is_the_built_one(
    kube_control_plane: LocalControlPlane, kube_api_client: client.ApiClient
) -> None:
    info = await client.VersionApi(kube_api_client).get_code()
    assert info.git_version == kube_control_plane.kubernetes_version
    assert kube_control_plane.kubernetes_version.startswith("v1.34.")
    assert (info.major, info.minor) == ("1", "34")
    assert info.git_tree_state == "clean"


def _suspended_job(name: str) -> client.V1Job:
    return client.V1Job(
        metadata=client.V1ObjectMeta(name=name, labels={"app": "kueuelog-test"}),
        spec=client.V1JobSpec(
            suspend=True,
            backoff_limit=0,
            template=client.V1PodTemplateSpec(
                spec=client.V1PodSpec(
                    restart_policy="Never",
                    containers=[client.V1Container(name="main", image="busybox:1.36", command=["true"])],
                )
            ),
        ),
    )


async def test_suspended_job_round_trip_and_unsuspend(kube_namespace: str, kube_api_client: client.ApiClient) -> None:
    batch = client.BatchV1Api(kube_api_client)
    core = client.CoreV1Api(kube_api_client)

    ns = await core.read_namespace(kube_namespace)
    assert ns.status.phase == "Active"

    created = await batch.create_namespaced_job(kube_namespace, _suspended_job("sample"))
    assert created.metadata.uid
    read = await batch.read_namespaced_job("sample", kube_namespace)
    assert read.spec.suspend is True
    assert read.metadata.uid == created.metadata.uid
    # Defaulting ran server-side: proof this is a real apiserver, not a stub.
    assert read.spec.completions == 1
    assert read.spec.template.spec.containers[0].image == "busybox:1.36"

    listed = await batch.list_namespaced_job(kube_namespace)
    assert [j.metadata.name for j in listed.items] == ["sample"]

    # Watch from the list's resourceVersion, so the patch cannot slip past the watch.
    w = watch.Watch()
    events: list[tuple[str, bool]] = []

    async def observe() -> None:
        async with w.stream(
            batch.list_namespaced_job,
            kube_namespace,
            resource_version=listed.metadata.resource_version,
            timeout_seconds=60,
        ) as stream:
            async for event in stream:
                events.append((event["type"], event["object"].spec.suspend))
                if event["type"] == "MODIFIED" and event["object"].spec.suspend is False:
                    return

    watcher = asyncio.create_task(observe())
    patched = await batch.patch_namespaced_job("sample", kube_namespace, {"spec": {"suspend": False}})
    assert patched.spec.suspend is False
    assert int(patched.metadata.generation) > int(created.metadata.generation)

    await asyncio.wait_for(watcher, timeout=30)
    assert ("MODIFIED", False) in events

    async def unsuspended() -> bool:
        job = await batch.read_namespaced_job("sample", kube_namespace)
        return job.spec.suspend is False

    await eventually(unsuspended, what="job sample to read back unsuspended")


def _widget_crd() -> client.V1CustomResourceDefinition:
    schema = client.V1JSONSchemaProps(
        type="object",
        properties={
            "spec": client.V1JSONSchemaProps(
                type="object",
                properties={"size": client.V1JSONSchemaProps(type="integer", minimum=0)},
                required=["size"],
            ),
            "status": client.V1JSONSchemaProps(
                type="object", properties={"phase": client.V1JSONSchemaProps(type="string")}
            ),
        },
    )
    return client.V1CustomResourceDefinition(
        metadata=client.V1ObjectMeta(name=CRD_NAME),
        spec=client.V1CustomResourceDefinitionSpec(
            group=GROUP,
            scope="Namespaced",
            names=client.V1CustomResourceDefinitionNames(
                plural=PLURAL, singular="widget", kind="Widget", list_kind="WidgetList"
            ),
            versions=[
                client.V1CustomResourceDefinitionVersion(
                    name=VERSION,
                    served=True,
                    storage=True,
                    schema=client.V1CustomResourceValidation(open_apiv3_schema=schema),
                    subresources=client.V1CustomResourceSubresources(status={}),
                )
            ],
        ),
    )


@contextlib.asynccontextmanager
async def _established_widget_crd(api: client.ApiClient) -> AsyncIterator[None]:
    ext = client.ApiextensionsV1Api(api)
    try:
        await ext.create_custom_resource_definition(_widget_crd())
    except ApiException as exc:
        if exc.status != 409:  # another test in this session made it already
            raise

    async def established() -> bool:
        crd = await ext.read_custom_resource_definition(CRD_NAME)
        conditions = (crd.status.conditions or []) if crd.status else []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    await eventually(established, what=f"CRD {CRD_NAME} to be Established")

    # Established is not the end: until the new resource's watch cache has initialised,
    # the apiserver answers 429 "storage is (re)initializing" (retryAfterSeconds=1), which
    # client-go retries by itself and kubernetes-asyncio does not.
    async def servable() -> bool:
        try:
            await client.CustomObjectsApi(api).list_cluster_custom_object(GROUP, VERSION, PLURAL, limit=1)
        except ApiException as exc:
            if exc.status in (404, 429, 503):
                return False
            raise
        return True

    await eventually(servable, what=f"{PLURAL}.{GROUP} to be listable")
    yield


async def test_crd_established_and_custom_object_watch(kube_namespace: str, kube_api_client: client.ApiClient) -> None:
    async with _established_widget_crd(kube_api_client):
        co = client.CustomObjectsApi(kube_api_client)
        listed = await co.list_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL)
        assert listed["items"] == []

        # Schema validation is live: a negative size is rejected with 422.
        with pytest.raises(ApiException) as rejected:
            await co.create_namespaced_custom_object(
                GROUP,
                VERSION,
                kube_namespace,
                PLURAL,
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "Widget",
                    "metadata": {"name": "bad"},
                    "spec": {"size": -1},
                },
            )
        assert rejected.value.status == 422

        seen: list[tuple[str, str, int, str | None]] = []
        w = watch.Watch()

        async def observe() -> None:
            async with w.stream(
                co.list_namespaced_custom_object,
                GROUP,
                VERSION,
                kube_namespace,
                PLURAL,
                resource_version=listed["metadata"]["resourceVersion"],
                timeout_seconds=60,
            ) as stream:
                async for event in stream:
                    obj = event["object"]
                    seen.append(
                        (
                            event["type"],
                            obj["metadata"]["name"],
                            obj["spec"]["size"],
                            (obj.get("status") or {}).get("phase"),
                        )
                    )
                    if event["type"] == "MODIFIED" and (obj.get("status") or {}).get("phase") == "Ready":
                        return

        watcher = asyncio.create_task(observe())
        created = await co.create_namespaced_custom_object(
            GROUP,
            VERSION,
            kube_namespace,
            PLURAL,
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "Widget",
                "metadata": {"name": "w1"},
                "spec": {"size": 3},
            },
        )
        assert created["metadata"]["uid"]
        # The status subresource: status is only writable through /status. A list body
        # makes the client send a JSON Patch; a dict would need
        # _content_type="application/merge-patch+json", which works at run time but is
        # missing from kubernetes-asyncio's type stubs.
        await co.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            kube_namespace,
            PLURAL,
            "w1",
            [{"op": "add", "path": "/status", "value": {"phase": "Ready"}}],
        )
        await asyncio.wait_for(watcher, timeout=30)
        assert seen[0] == ("ADDED", "w1", 3, None)
        assert seen[-1] == ("MODIFIED", "w1", 3, "Ready")

        got = await co.get_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "w1")
        assert got["status"] == {"phase": "Ready"}
        assert got["metadata"]["generation"] == 1  # a status write does not bump generation


async def _watch_until_cut(core: client.CoreV1Api, namespace: str, resource_version: str) -> str:
    """Watch config maps until the stream stops; say how it stopped."""
    w = watch.Watch()
    try:
        # With timeout_seconds set, kubernetes-asyncio ends the iteration when the server
        # closes the stream; without it, it would silently reconnect.
        async with w.stream(
            core.list_namespaced_config_map, namespace, resource_version=resource_version, timeout_seconds=120
        ) as stream:
            async for _ in stream:
                pass
    except Exception as exc:
        return type(exc).__name__
    return "ended"


@pytest.mark.parametrize(
    ("grace_s", "expected"),
    [
        # Graceful: the apiserver ends open watches itself, the client sees a clean end.
        (10.0, {"ended"}),
        # Crash (SIGKILL): the chunked response is cut off mid-stream.
        (0.0, {"ClientPayloadError", "ServerDisconnectedError", "ClientOSError"}),
    ],
    ids=["graceful", "crash"],
)
async def test_restart_apiserver_cuts_watches_and_keeps_state(
    kube_control_plane: LocalControlPlane,
    kube_namespace: str,
    kube_api_client: client.ApiClient,
    grace_s: float,
    expected: set[str],
) -> None:
    # Runs last in this file: it cuts every open connection of the shared apiserver.
    core = client.CoreV1Api(kube_api_client)
    await core.create_namespaced_config_map(
        kube_namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="kept"), data={"k": "v"})
    )
    listed = await core.list_namespaced_config_map(kube_namespace)
    server, old_pid = kube_control_plane.server, kube_control_plane.apiserver_pid

    watcher = asyncio.create_task(_watch_until_cut(core, kube_namespace, listed.metadata.resource_version))
    await asyncio.sleep(0.5)  # let the watch request reach the server
    assert not watcher.done()

    started = time.monotonic()
    await kube_control_plane.restart_apiserver_async(grace_s=grace_s)
    restart_s = time.monotonic() - started

    assert await asyncio.wait_for(watcher, timeout=30) in expected
    assert kube_control_plane.server == server
    assert kube_control_plane.apiserver_pid not in (None, old_pid)
    assert restart_s < 30
    # The same kubeconfig (URL, CA, token) works on a fresh client, and etcd kept the data.
    async with open_api_client(kube_control_plane) as api:
        cm = await client.CoreV1Api(api).read_namespaced_config_map("kept", kube_namespace)
        assert cm.data == {"k": "v"}
