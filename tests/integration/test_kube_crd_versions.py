"""Our CRDs as Kueue ships them, in a real kube-apiserver: versions, conversion, the pod template.

- Every example of our Kueue-style corpus (tests/fixtures/kueue-examples) applies at the version it
  is written in and reads back at every served version with every field it was written with
  (nothing pruned), meaning the same to our parser once respelled (events/kueue_versions.py).
- The CRDs install over CRDs that stored v1alpha1/v1beta1 and then v1beta2 with Kueue's
  conversion webhook configured (and no webhook running, as after Kueue is removed): the objects
  stored at every version read back at every version without it. The v1beta1-only CRDs we used
  to ship are refused there, as the issue reported.
- The Workload pod-template schema is the one derived from this API server's OpenAPI.
"""

from __future__ import annotations

import contextlib
import copy
import json
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from events import dra
from events import objects as o
from events.kueue_versions import respell
from events.manifests import Document, normalize, read_documents
from tests.infra.pod_template_schema import pod_template_schema, template_schemas
from tests.integration.kube_deploy import (
    KUEUE_GROUP,
    ROOT,
    apply_crds,
    crd_documents,
    create_or_replace,
    error_causes,
    eventually,
    served_versions,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

CORPUS = ROOT / "tests" / "fixtures" / "kueue-examples"
NAMESPACED = {"LocalQueue", "Workload", dra.KIND}
PLURALS = {crd["spec"]["names"]["kind"]: crd["spec"]["names"]["plural"] for crd in crd_documents()}


def corpus() -> list[Document]:
    """Every Kueue API object of the corpus, in file order (Kueue's Configuration is a file, not an object)."""
    return [doc for path in sorted(CORPUS.glob("*.yaml")) for doc in read_documents(path.name, path.read_text())
            if doc.body["apiVersion"].startswith(f"{KUEUE_GROUP}/")]


def in_namespace(body: dict[str, Any], namespace: str) -> dict[str, Any]:
    body = copy.deepcopy(body)
    if body["kind"] in NAMESPACED:
        body["metadata"]["namespace"] = namespace
    return body


class Objects:
    """Create, read and delete Kueue objects at any version through CustomObjectsApi."""

    def __init__(self, api: client.ApiClient) -> None:
        self.co = client.CustomObjectsApi(api)

    async def create(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create it; a status it carries (an admitted Workload of a case) is written through the
        status subresource then, as a controller would (a create ignores it)."""
        version, plural = body["apiVersion"].split("/")[1], PLURALS[body["kind"]]
        merge = "application/merge-patch+json"
        if body["kind"] in NAMESPACED:
            ns = body["metadata"]["namespace"]
            try:
                made: dict[str, Any] = await self.co.create_namespaced_custom_object(KUEUE_GROUP, version, ns, plural,
                                                                                    body)
            except ApiException as exc:  # a later document of the same object (a case's update of it)
                if exc.status != 409:
                    raise
                old = await self.co.get_namespaced_custom_object(KUEUE_GROUP, version, ns, plural,
                                                                 body["metadata"]["name"])
                made = await self.co.replace_namespaced_custom_object(
                    KUEUE_GROUP, version, ns, plural, body["metadata"]["name"],
                    {**body, "metadata": {**body["metadata"], "resourceVersion": old["metadata"]["resourceVersion"]}})
            if body.get("status"):
                made = await self.co.patch_namespaced_custom_object_status(
                    KUEUE_GROUP, version, ns, plural, body["metadata"]["name"], {"status": body["status"]},
                    _content_type=merge)
            return made
        made = await self.co.create_cluster_custom_object(KUEUE_GROUP, version, plural, body)
        if body.get("status"):
            made = await self.co.patch_cluster_custom_object_status(
                KUEUE_GROUP, version, plural, body["metadata"]["name"], {"status": body["status"]}, _content_type=merge)
        return made

    async def read(self, body: dict[str, Any], version: str) -> dict[str, Any]:
        plural, name = PLURALS[body["kind"]], body["metadata"]["name"]
        if body["kind"] in NAMESPACED:
            return await self.co.get_namespaced_custom_object(  # type: ignore[no-any-return]
                KUEUE_GROUP, version, body["metadata"]["namespace"], plural, name)
        return await self.co.get_cluster_custom_object(KUEUE_GROUP, version, plural, name)  # type: ignore[no-any-return]

    async def delete(self, body: dict[str, Any]) -> None:
        version, plural, name = body["apiVersion"].split("/")[1], PLURALS[body["kind"]], body["metadata"]["name"]
        try:
            if body["kind"] in NAMESPACED:
                await self.co.delete_namespaced_custom_object(KUEUE_GROUP, version, body["metadata"]["namespace"],
                                                              plural, name)
            else:
                await self.co.delete_cluster_custom_object(KUEUE_GROUP, version, plural, name)
        except ApiException as exc:
            if exc.status != 404:
                raise


def missing(written: Any, stored: Any, path: str = "") -> list[str]:
    """Paths of what was written but is not stored as written (pruned or changed)."""
    if isinstance(written, dict):
        if not isinstance(stored, dict):
            return [path or "."]
        return [p for k, v in written.items() for p in missing(v, stored.get(k, _ABSENT), f"{path}.{k}")]
    if isinstance(written, list):
        if not isinstance(stored, list) or len(stored) != len(written):
            return [path]
        return [p for i, (w, s) in enumerate(zip(written, stored, strict=True)) for p in missing(w, s, f"{path}[{i}]")]
    return [] if written == stored else [path]


_ABSENT = object()


def what_it_means(body: dict[str, Any]) -> Any:
    return normalize(Document("api", 1, respell(body)))


def without_server_fields(body: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in body["metadata"].items() if k in ("name", "namespace", "labels", "annotations")}
    return {**body, "metadata": meta}


async def test_every_example_applies_and_reads_back_whole_at_every_version(
    kube_api_client: client.ApiClient, kube_namespace: str,
) -> None:
    crds = {crd["spec"]["names"]["kind"]: crd for crd in await apply_crds(kube_api_client)}
    objects = Objects(kube_api_client)
    docs = corpus()
    assert len(docs) == 44  # with the MultiKueue files 12 and 13
    created: list[dict[str, Any]] = []
    try:
        for doc in docs:
            body = in_namespace(doc.body, kube_namespace)
            stored = await objects.create(body)
            created.append(body)
            where = f"{doc.file}#{doc.index} {body['kind']} {body['metadata']['name']}"
            want = what_it_means(body)
            for version in served_versions(crds[body["kind"]]):
                got = await objects.read(body, version)
                assert got["apiVersion"] == f"{KUEUE_GROUP}/{version}"
                # Conversion None: the same fields at every version, nothing pruned.
                assert missing({k: v for k, v in body.items() if k != "apiVersion"}, got) == [], (where, version)
                assert without_server_fields({**got, "apiVersion": ""}) == \
                    without_server_fields({**stored, "apiVersion": ""}), (where, version)
                assert what_it_means(without_server_fields(got)) == want, (where, version)
    finally:
        for body in reversed(created):
            await objects.delete(body)


SITE_CASES = sorted((ROOT / "tests" / "fixtures" / "kueue-site-examples" / "cases").glob("*.yaml"))


def site_case(path: Any) -> list[Document]:
    """The manifests of one case of the Kueue site-examples corpus (its header dropped)."""
    _, _, manifests = path.read_text().partition("\n---\n")
    return read_documents(path.name, manifests)


def job_means(body: dict[str, Any]) -> Any:
    wl = normalize(Document("api", 1, body))
    assert isinstance(wl, o.Workload)
    return wl.queue_name, wl.pod_sets  # uid, name and creation time are the server's


async def apply_site_case(api: client.ApiClient, crds: dict[str, Any], docs: list[Document], namespace: str,
                          created: list[dict[str, Any]]) -> int:
    objects, batch, applied = Objects(api), client.BatchV1Api(api), 0
    seen: set[tuple[str, str]] = set()
    for doc in docs:
        body = in_namespace(doc.body, namespace)
        where = f"{doc.file}#{doc.index} {body['kind']}"
        if body["apiVersion"].startswith(f"{KUEUE_GROUP}/"):
            await objects.create(body)
            created.append(body)
            # A later document of the same object updates its spec; its status stays the server's.
            again = (body["kind"], body["metadata"]["name"]) in seen
            seen.add((body["kind"], body["metadata"]["name"]))
            for version in served_versions(crds[body["kind"]]):
                got = await objects.read(body, version)
                # creationTimestamp is the server's: a case's own (its log time) is not what is compared
                want = without_server_fields(body)
                if again:
                    got, want = ({k: v for k, v in b.items() if k != "status"} for b in (got, want))
                assert what_it_means(without_server_fields(got)) == what_it_means(want), (where, version)
        elif body["kind"] == "Job":
            body["metadata"]["namespace"] = namespace
            job = await batch.create_namespaced_job(namespace, body)  # type: ignore[arg-type]
            created.append({"kind": "Job", "metadata": {"name": job.metadata.name, "namespace": namespace}})
            readback = api.sanitize_for_serialization(await batch.read_namespaced_job(job.metadata.name, namespace))
            named = {**body, "metadata": {**body["metadata"], "name": job.metadata.name}}  # generateName
            assert job_means({"apiVersion": "batch/v1", "kind": "Job", **readback}) == job_means(named), where
        elif body["kind"] == dra.KIND:
            await apply_claim_template(api, body, namespace, where)
            created.append(body)
        else:
            assert body["kind"] == "Configuration", where  # Kueue's file, not an API object
            continue
        applied += 1
    return applied


async def apply_claim_template(api: client.ApiClient, body: dict[str, Any], namespace: str, where: str) -> None:
    """A ResourceClaimTemplate through the API server's own resource.k8s.io API (kube-apiserver
    1.34 serves v1 by default, v1beta1 and v1beta2 only when enabled), read back at each served
    version: it counts the same
    devices as the manifest (the server defaults count and allocationMode as events/dra.py does)."""
    co = client.CustomObjectsApi(api)
    version = body["apiVersion"].split("/")[1]
    await co.create_namespaced_custom_object(dra.GROUP, version, namespace, "resourceclaimtemplates", body)
    name = body["metadata"]["name"]
    want = dra.read_template(_Where(where), version, body, namespace, name)
    groups = (await client.ApisApi(api).get_api_versions()).groups
    versions = [v.version for g in groups if g.name == dra.GROUP for v in g.versions]
    assert "v1" in versions, versions  # what Kueue reads; the betas are off by default in 1.34
    for served in versions:
        got = await co.get_namespaced_custom_object(dra.GROUP, served, namespace, "resourceclaimtemplates", name)
        assert dra.read_template(_Where(where), served, got, namespace, name) == want, (where, served)


class _Where:
    def __init__(self, where: str) -> None:
        self.where = where

    def error(self, field: str, message: str) -> Exception:
        return AssertionError(f"{self.where}: {field}: {message}")


async def delete_site_case(api: client.ApiClient, created: list[dict[str, Any]]) -> None:
    objects, batch = Objects(api), client.BatchV1Api(api)
    for body in reversed(created):
        if body["kind"] == dra.KIND:
            await client.CustomObjectsApi(api).delete_namespaced_custom_object(
                dra.GROUP, body["apiVersion"].split("/")[1], body["metadata"]["namespace"], "resourceclaimtemplates",
                body["metadata"]["name"])
        elif body["kind"] == "Job":
            with contextlib.suppress(ApiException):
                await batch.delete_namespaced_job(body["metadata"]["name"], body["metadata"]["namespace"],
                                                  propagation_policy="Background")
        else:
            await objects.delete(body)
    created.clear()


async def test_every_case_of_kueues_site_examples_applies_and_reads_back_meaning_the_same(
    kube_api_client: client.ApiClient, kube_namespace: str,
) -> None:
    """tests/fixtures/kueue-site-examples: each case's Kueue objects through our CRDs at the version
    they are written in, read back at every served version; its Jobs as the API server stores them.
    Case by case (the cases reuse names), each cleaned up before the next."""
    crds = {crd["spec"]["names"]["kind"]: crd for crd in await apply_crds(kube_api_client)}
    assert len(SITE_CASES) == 21
    applied = 0
    created: list[dict[str, Any]] = []
    try:
        for path in SITE_CASES:
            applied += await apply_site_case(kube_api_client, crds, site_case(path), kube_namespace, created)
            await delete_site_case(kube_api_client, created)
    finally:
        await delete_site_case(kube_api_client, created)
    assert applied == sum(1 for path in SITE_CASES for d in site_case(path) if d.body["kind"] != "Configuration")


async def test_the_pod_template_schema_is_derived_from_this_api_servers_openapi(
    kube_api_client: client.ApiClient,
) -> None:
    resp = await kube_api_client.call_api("/openapi/v3/api/v1", "GET", header_params={"Accept": "application/json"},
                                          auth_settings=["BearerToken"], _preload_content=False)
    try:
        openapi = json.loads(await resp.read())
    finally:
        resp.release()
    want = pod_template_schema(openapi)
    (workload,) = [crd for crd in crd_documents() if crd["spec"]["names"]["kind"] == "Workload"]
    for version, schema in template_schemas(workload).items():
        got = {k: v for k, v in schema.items() if k != "description"}
        assert got == want, (f"{version}: deploy/crds/workload.yaml's pod template differs from this API server's; "
                             "regenerate it (tests/infra/pod_template_schema.py)")


# --- installing over a cluster that ran Kueue ------------------------------------------------------

KUEUE_WEBHOOK = {"strategy": "Webhook", "webhook": {
    "conversionReviewVersions": ["v1"],
    "clientConfig": {"service": {"namespace": "kueue-system", "name": "kueue-webhook-service", "path": "/convert"}},
}}


def history(kind: str) -> list[str]:
    """The storage versions a Kueue installation went through (Cohort started as v1alpha1)."""
    return ["v1alpha1", "v1beta1", "v1beta2"] if kind == "Cohort" else ["v1beta1", "v1beta2"]


def kueue_era_crd(ours: dict[str, Any], versions: list[str], storage: str, webhook: bool) -> dict[str, Any]:
    """A CRD as a Kueue release installed it: ``versions`` served, ``storage`` stored, conversion by
    Kueue's webhook (which is not running here)."""
    crd = copy.deepcopy(ours)
    crd["spec"]["versions"] = [{**v, "storage": v["name"] == storage} for v in crd["spec"]["versions"]
                               if v["name"] in versions]
    crd["spec"]["conversion"] = KUEUE_WEBHOOK if webhook else {"strategy": "None"}
    return crd


async def wait_deleted(ext: client.ApiextensionsV1Api, name: str) -> None:
    async def gone() -> bool:
        try:
            await ext.read_custom_resource_definition(name)
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False

    await eventually(gone, timeout=60, what=f"CRD {name} to be deleted")


async def wait_servable(api: client.ApiClient, crd: dict[str, Any], version: str) -> None:
    ext, co = client.ApiextensionsV1Api(api), client.CustomObjectsApi(api)
    name, plural = crd["metadata"]["name"], crd["spec"]["names"]["plural"]

    async def established() -> bool:
        got = await ext.read_custom_resource_definition(name)
        if not any(c.type == "Established" and c.status == "True" for c in (got.status.conditions or [])):
            return False
        try:  # right after a change the apiserver may answer 404/429/503 for a moment, and 500 while
            # the storage it had made for the old conversion (Kueue's webhook) is being replaced
            await co.list_cluster_custom_object(KUEUE_GROUP, version, plural, limit=1)
        except ApiException as exc:
            if exc.status in (404, 429, 500, 503):
                return False
            raise
        return True

    await eventually(established, timeout=60, what=f"{name} {version} to be served")


async def created_when_served(ext: client.ApiextensionsV1Api, objects: Objects, name: str,
                              body: dict[str, Any]) -> None:
    async def created() -> bool:
        got = await ext.read_custom_resource_definition(name)
        if not any(c.type == "Established" and c.status == "True" for c in (got.status.conditions or [])):
            return False
        try:
            await objects.create(body)
        except ApiException as exc:
            if exc.status in (404, 429, 503):  # the new version is not served yet
                return False
            raise
        return True

    await eventually(created, timeout=60, what=f"{body['kind']} {body['metadata']['name']} to be created")


async def test_installs_over_crds_that_stored_every_kueue_version(
    kube_api_client: client.ApiClient, kube_namespace: str,
) -> None:
    ext = client.ApiextensionsV1Api(kube_api_client)
    objects = Objects(kube_api_client)
    examples: dict[tuple[str, str], dict[str, Any]] = {}
    for doc in corpus():  # the first example of each kind at each version
        version = doc.body["apiVersion"].split("/")[1]
        examples.setdefault((doc.body["kind"], version), in_namespace(doc.body, kube_namespace))
    created: list[dict[str, Any]] = []
    try:
        for ours in [c for c in crd_documents() if c["spec"]["group"] == KUEUE_GROUP]:  # not the autoscaler's
            kind, name = ours["spec"]["names"]["kind"], ours["metadata"]["name"]
            try:  # a fresh start: Kueue's first release meets no CRD (this deletes its objects too)
                await ext.delete_custom_resource_definition(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
            await wait_deleted(ext, name)
            # Kueue, release after release: each stores a newer version; objects stay where they were written.
            steps = history(kind)
            for i, storage in enumerate(steps):
                crd = kueue_era_crd(ours, steps[: i + 1], storage, webhook=i > 0)
                await create_or_replace(kube_api_client, crd)
                body = examples[(kind, storage)]
                # At the storage version: no conversion needed (a LIST would need the absent webhook
                # for the objects stored earlier, so the create itself is retried until served).
                await created_when_served(ext, objects, name, body)
                created.append(body)
            stored_crd = await ext.read_custom_resource_definition(name)
            assert stored_crd.status.stored_versions == steps, kind

            # What we shipped before: v1beta1 only. Refused, as the issue says.
            old = kueue_era_crd(ours, [v for v in steps if v != "v1beta2"], "v1beta1", webhook=False)
            with pytest.raises(ApiException) as refused:
                await create_or_replace(kube_api_client, old)
            message, causes = error_causes(refused.value)
            assert refused.value.status == 422
            assert any(field.startswith("status.storedVersions") and "missing from spec.versions" in text
                       for field, text in causes), (message, causes)

            # Ours: accepted; every object, stored at whichever version, reads at every version, no webhook.
            await create_or_replace(kube_api_client, ours)
            for version in served_versions(ours):
                await wait_servable(kube_api_client, ours, version)
            for body in [b for b in created if b["kind"] == kind]:
                want = what_it_means(body)
                for version in served_versions(ours):
                    got = await objects.read(body, version)
                    assert missing({k: v for k, v in body.items() if k != "apiVersion"}, got) == [], (kind, version)
                    assert what_it_means(without_server_fields(got)) == want, (kind, body["apiVersion"], version)
            stored_crd = await ext.read_custom_resource_definition(name)
            assert stored_crd.status.stored_versions == steps, kind
    finally:
        await apply_crds(kube_api_client)
        for body in reversed(created):
            await objects.delete(body)
