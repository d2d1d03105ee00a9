"""SIGKILL mid-provisioning creates no duplicate ProvisioningRequest.

Jobs behind a ProvisioningRequest admission check run through ``kueuelog run`` processes over
one embedded log in simulated time; the simulated autoscaler answers after a while (and, with
``run all``, fails each first attempt, so retries and back-offs are crossed too). A service
chosen at random (fixed seed) is SIGKILLed and restarted every few dozen records. At the end:
every request created once, every answer reported once, every Job admitted after its check and
finished once, and ``replay --verify`` reproduces every decision.
"""

from __future__ import annotations

import random
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from events.cluster import SIM_DURATION_ANNOTATION
from events.codec import decode_decision, decode_envelope
from events.messages import AdmitChecked, AdmitWorkload, ProvisioningRequestObserved, WorkloadFinished
from events.simcluster import RequestCreated, decode_sim_record, sim_cluster_topic
from services.runtime.sqlite import SqliteLog
from tests.builders import a_cluster_queue, a_flavor, a_job, a_local_queue
from tests.integration.test_chaos import CLI, T, _all, _finished, _Services, _size

pytestmark = pytest.mark.integration

JOBS = 12
CLASS = "check-capacity.autoscaling.x-k8s.io"
DEADLINE_S = 300


def _manifests() -> str:
    cq = a_cluster_queue("cq").flavor("default", cpu="4").admission_checks("prov")
    check = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "AdmissionCheck", "metadata": {"name": "prov"},
             "spec": {"controllerName": "kueue.x-k8s.io/provisioning-request",
                      "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig",
                                     "name": "prc"}}}
    prc = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ProvisioningRequestConfig", "metadata": {"name": "prc"},
           "spec": {"provisioningClassName": CLASS,
                    "retryStrategy": {"backoffLimitCount": 2, "backoffBaseSeconds": 30, "backoffMaxSeconds": 60}}}
    jobs = [a_job("team", f"job-{i:02d}", "lq").parallelism(1).request(cpu="1")
            .annotate(SIM_DURATION_ANNOTATION, f"{40 + 5 * (i % 4)}s").created(i * 15) for i in range(JOBS)]
    objects = [a_flavor("default").obj(), check, prc, cq.obj(), a_local_queue("team", "lq", "cq").obj(),
               *(j.obj() for j in jobs)]
    return yaml.safe_dump_all(objects, sort_keys=False)


def _check(directory: Path, *, retries: bool) -> None:
    log = SqliteLog(directory, create=False)
    sim = [decode_sim_record(v) for v in _all(log, sim_cluster_topic(T))]
    created = Counter(f"{r.namespace}/{r.plan.name}" for r in sim if isinstance(r, RequestCreated))
    assert created and max(created.values()) == 1, f"a ProvisioningRequest was created twice: {created}"
    envelopes = [decode_envelope(v) for v in _all(log, T.cluster_events)]
    answers = Counter(e.id for e in envelopes if isinstance(e.event, ProvisioningRequestObserved))
    assert max(answers.values()) == 1, "an answer of the autoscaler was reported twice"
    finished = Counter(e.event.name for e in envelopes if isinstance(e.event, WorkloadFinished))
    assert len(finished) == JOBS and max(finished.values()) == 1, finished
    decisions = [decode_decision(v) for v in _all(log, T.decisions)]
    plans = Counter(p.name for d in decisions if isinstance(d, AdmitWorkload) for p in d.provisioning_requests or ())
    assert set(plans) == {name.partition("/")[2] for name in created}, "every planned request created, no other"
    assert max(plans.values()) == 1, "a request planned twice"
    assert len([d for d in decisions if isinstance(d, AdmitChecked)]) == JOBS
    attempts = {p.attempt for d in decisions if isinstance(d, AdmitWorkload) for p in d.provisioning_requests or ()}
    assert attempts == ({1, 2} if retries else {1})


@pytest.mark.parametrize("together", [False, True], ids=["each service a process", "run all, with retries"])
def test_sigkill_mid_provisioning_creates_no_duplicate_request(tmp_path: Path, together: bool) -> None:
    directory, out = tmp_path / "log", tmp_path / "out"
    out.mkdir()
    manifests = tmp_path / "jobs.yaml"
    manifests.write_text(_manifests())
    services = _Services(directory, manifests, out, together=together)
    # In separate processes time advances only through the simulated cluster's own reports, which
    # do not know the scheduler's back-offs: there the class succeeds; run all also retries.
    behaviour = f"{CLASS}=fail:1:10s" if together else f"{CLASS}=succeed:20s"
    for name in ("all", "simcluster"):
        if name in services.args:
            services.args[name] += ["--provisioning", behaviour]
    chooser = random.Random(20261126)
    for name in services.args:
        services.start(name)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not directory.joinpath("log.db").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        log = SqliteLog(directory, create=False)
        last = 0
        while time.monotonic() < deadline and _finished(log) < JOBS:
            services.check_alive()
            size = _size(log)
            if size - last >= 15:
                victim = chooser.choice(sorted(services.args))
                services.kill(victim)
                services.start(victim)
                last = size
            time.sleep(0.05)
        assert _finished(log) == JOBS, f"not done by the deadline after kills {dict(services.kills)}"
    finally:
        services.stop()
    assert sum(services.kills.values()) >= 3, f"too few kills to mean anything: {dict(services.kills)}"
    _check(directory, retries=together)
    verify = subprocess.run([*CLI, "replay", str(directory), "--verify"], capture_output=True, text=True, check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr
