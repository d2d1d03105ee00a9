"""Pytest plugin that owns the test session's local Kubernetes control plane.

Fixtures:

* ``kube_control_plane`` (session): a started :class:`tests.infra.kube.LocalControlPlane`
  (etcd + kube-apiserver, no kubelet or controllers). Use its ``kubeconfig_path``,
  ``server``, ``token``, ``ca_path``, and ``restart_apiserver()`` to cut every open
  connection and watch. If it cannot be built or started, every test that needs it
  *errors* with the reason and the log tails: a missing cluster is a broken environment,
  never a skip.
* ``kube_worker_plane`` (session): a second one, for tests of several clusters (MultiKueue).
* ``kube_api_client`` (function): a ``kubernetes_asyncio.client.ApiClient`` for that
  cluster, closed after the test. It lives on the test's own event loop (function scope,
  the project default); a test that runs on another loop opens its own with
  :func:`open_api_client` instead.
* ``kube_namespace`` (function): the name of a fresh namespace, unique to the test. The
  namespace is deleted afterwards without waiting: with no namespace controller it would
  stay ``Terminating`` forever anyway, and unique names keep tests apart.

Building the binaries can take 10-20+ minutes on a cold cache. That happens once, after
collection and before the first test, so no per-test timeout covers it and its progress
lines reach the terminal even with output capturing on.

When a test that used the cluster fails, its report gets a "kube control plane" section
with the log paths and tails.

Enable with ``pytest_plugins = ["tests.infra.pytest_kube"]`` or ``-p tests.infra.pytest_kube``.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from typing import Final

import pytest
import pytest_asyncio
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from tests.infra.kube import KubeError, LocalControlPlane

_PLANE = pytest.StashKey[LocalControlPlane]()
_BUILD_ERROR = pytest.StashKey[str]()
FIXTURE = "kube_control_plane"
# Anything that means "no cluster": reported as the tests' error, never raised from a hook.
_SETUP_ERRORS = (KubeError, OSError, subprocess.SubprocessError)


def _terminal_logger(config_: pytest.Config) -> Callable[[str], None]:
    """Print straight to the terminal, past pytest's capturing, so CI sees progress."""
    capman = config_.pluginmanager.getplugin("capturemanager")

    def log(line: str) -> None:
        cm = capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext()
        with cm:
            print(line, file=sys.stderr, flush=True)

    return log


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the binaries up front if any selected test needs the cluster.

    Doing it here rather than in the fixture keeps a cold 10-20 minute build out of the
    first test's setup, where a per-test timeout would cut it short.
    """
    if session.config.option.collectonly:
        return
    if not any(FIXTURE in getattr(item, "fixturenames", ()) for item in session.items):
        return
    try:
        plane = LocalControlPlane(log=_terminal_logger(session.config))
        session.config.stash[_PLANE] = plane
        plane.ensure_built()
    except _SETUP_ERRORS as exc:
        # Recorded, not raised: the tests that need the cluster error with this reason,
        # the others still run.
        session.config.stash[_BUILD_ERROR] = str(exc)


@pytest.fixture(scope="session")
def kube_control_plane(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalControlPlane]:
    stash = request.config.stash
    error = stash.get(_BUILD_ERROR, None)
    if error is not None:
        pytest.fail(f"local control plane could not be built: {error}", pytrace=False)
    # Under pytest's basetemp: kept for the last few sessions, so a failed run's logs
    # can still be read afterwards, and old ones are cleaned up automatically.
    run_dir = tmp_path_factory.mktemp("kube")
    plane = stash.get(_PLANE, None)
    try:
        if plane is None:  # e.g. requested dynamically, so collection did not see it
            plane = LocalControlPlane(log=_terminal_logger(request.config))
            stash[_PLANE] = plane
        plane.ensure_built()
        plane.start(run_dir)
    except _SETUP_ERRORS as exc:
        # pytest.fail makes every dependent test an error (never a skip), and pytest
        # caches a session fixture's failure, so it is not retried per test.
        logs = plane.log_tails(20) if plane is not None else ""
        pytest.fail(f"local control plane did not start: {exc}\n{logs}", pytrace=False)
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def kube_worker_plane(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, kube_control_plane: LocalControlPlane,
) -> Iterator[LocalControlPlane]:
    """A second control plane (its own etcd and kube-apiserver, on other ports and directories,
    the same cached binaries): a MultiKueue worker cluster beside ``kube_control_plane``, the
    manager. Started after the first (they share two cores); stopped at the end of the session."""
    run_dir = tmp_path_factory.mktemp("kube-worker")
    plane = LocalControlPlane(log=_terminal_logger(request.config))
    try:
        plane.ensure_built()
        plane.start(run_dir)
    except _SETUP_ERRORS as exc:
        pytest.fail(f"the second local control plane did not start: {exc}\n{plane.log_tails(20)}", pytrace=False)
    try:
        yield plane
    finally:
        plane.stop()


async def load_configuration(plane: LocalControlPlane) -> client.Configuration:
    """A client Configuration read from the plane's kubeconfig (server, CA, token)."""
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(plane.kubeconfig_path), client_configuration=cfg)
    return cfg


@contextlib.asynccontextmanager
async def open_api_client(plane: LocalControlPlane) -> AsyncIterator[client.ApiClient]:
    """An ApiClient bound to the running loop; closed (its aiohttp session too) on exit."""
    api = client.ApiClient(configuration=await load_configuration(plane))
    try:
        yield api
    finally:
        await api.close()


@pytest_asyncio.fixture(loop_scope="function")
async def kube_api_client(kube_control_plane: LocalControlPlane) -> AsyncIterator[client.ApiClient]:
    # loop_scope="function" matches the tests' default loop: an aiohttp session must be
    # used on the loop that created it.
    async with open_api_client(kube_control_plane) as api:
        yield api


def _namespace_name(test_name: str) -> str:
    # DNS-1123 label: lowercase alphanumerics and '-', at most 63 characters.
    slug = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:40].strip("-")
    return f"t-{slug}-{uuid.uuid4().hex[:8]}" if slug else f"t-{uuid.uuid4().hex[:12]}"


@pytest_asyncio.fixture
async def kube_namespace(request: pytest.FixtureRequest, kube_control_plane: LocalControlPlane) -> AsyncIterator[str]:
    # Its own short-lived client, so this works whatever loop the fixture runs on; only
    # the name crosses over to the test.
    name = _namespace_name(request.node.name)
    async with open_api_client(kube_control_plane) as api:
        body = client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={"kueuelog.io/test": "true"}))
        await client.CoreV1Api(api).create_namespace(body)
    yield name
    with contextlib.suppress(Exception):
        async with open_api_client(kube_control_plane) as api:
            await empty_namespace(api, name)
            await client.CoreV1Api(api).delete_namespace(name)


# What kueuelog's services watch in a namespace. The test control plane runs no namespace controller,
# so a deleted namespace keeps its objects for the rest of the run, and every later test's services
# (they watch the whole cluster) would list them and retry decisions about them: they go first.
_WATCHED: Final = (("kueue.x-k8s.io", "v1beta2", "workloads"), ("kueue.x-k8s.io", "v1beta2", "localqueues"),
                   ("jobset.x-k8s.io", "v1alpha2", "jobsets"), ("kubeflow.org", "v1", "pytorchjobs"),
                   ("ray.io", "v1", "rayjobs"), ("ray.io", "v1", "rayclusters"),
                   ("workload.codeflare.dev", "v1beta2", "appwrappers"),
                   ("trainer.kubeflow.org", "v1alpha1", "trainjobs"),
                   ("trainer.kubeflow.org", "v1alpha1", "trainingruntimes"))


async def empty_namespace(api: client.ApiClient, namespace: str) -> None:
    """Delete the Jobs, pods and Kueue and job-kind objects of ``namespace`` (each kind that is served)."""
    with contextlib.suppress(ApiException):
        await client.BatchV1Api(api).delete_collection_namespaced_job(namespace, propagation_policy="Background")
    with contextlib.suppress(ApiException):
        await client.CoreV1Api(api).delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    objects = client.CustomObjectsApi(api)
    for group, version, plural in _WATCHED:
        with contextlib.suppress(ApiException):
            await objects.delete_collection_namespaced_custom_object(group, version, namespace, plural)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if not report.failed or FIXTURE not in getattr(item, "fixturenames", ()):
        return report
    plane = item.config.stash.get(_PLANE, None)
    if plane is not None and plane.run_dir is not None:
        server = plane.server if plane.apiserver_port else "(not started)"
        report.sections.append(("kube control plane", f"server {server}\n{plane.log_tails(40)}"))
    return report
