"""``kueuelog simulate --from-log``: what-if from a real log.

The log is the examples' morning, run by the same loop as ``kueuelog demo`` (scheduler, actuator,
simulated cluster, in simulated time). From its start with no change, the what-if admits every
workload when it really was admitted (the recorded run lengths are the simulated cluster's); with
more quota for the saturated team-b-cq from mid-morning on, team-b's workloads wait less, and
nothing before that point changes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from events.envelope import Topics
from events.manifests import parse_time
from services.app.driver import drive_until_idle
from services.app.logview import replay, resolve_until
from services.app.whatif import queue_table, report_lines, to_json, what_if
from services.runtime.sqlite import SqliteLog
from services.simcluster.arrivals import ArrivalStream, read_files

T = Topics()
EXAMPLES = sorted(str(p) for p in (Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))
MORE_FOR_TEAM_B = """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata:
  name: team-b-cq
spec:
  cohort: research
  namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: team-b
  queueingStrategy: StrictFIFO
  preemption:
    reclaimWithinCohort: Any
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: on-demand
      resources:
      - name: cpu
        nominalQuota: 32
        lendingLimit: 6
      - name: memory
        nominalQuota: 128Gi
    - name: spot
      resources:
      - name: cpu
        nominalQuota: 6
      - name: memory
        nominalQuota: 24Gi
"""


@pytest.fixture(scope="module")
def morning(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqliteLog]:
    log = SqliteLog(tmp_path_factory.mktemp("morning"), durable=False)
    drive_until_idle(log, arrivals=ArrivalStream.from_files(log, read_files(EXAMPLES), topics=T))
    yield log
    log.close()


def test_no_change_from_the_start_admits_every_workload_when_it_really_was(morning: SqliteLog) -> None:
    result = what_if(morning, T, at=0, changes=[], for_ms=None)
    assert len(result.real_admit) == 324  # 320 Jobs and examples/30-workload-kinds.yaml
    assert result.whatif_admit == result.real_admit
    assert result.whatif_usage.keys() == result.real_usage.keys()
    for cq, usage in result.real_usage.items():
        assert result.whatif_usage[cq] == pytest.approx(usage)


def test_more_quota_for_a_saturated_queue_shortens_its_waits_and_changes_nothing_before(
        morning: SqliteLog, tmp_path: Path) -> None:
    change = tmp_path / "more-b.yaml"
    change.write_text(MORE_FOR_TEAM_B)
    at = resolve_until(morning, T, "2025-01-01T10:00:00Z")
    assert at is not None
    before = replay(morning, T, verify=False, until=at).scheduler
    assert before is not None
    admitted_before = {k: r.admission for k, r in before.state.workloads.items() if r.admission is not None}
    result = what_if(morning, T, at=at, changes=[str(change)], for_ms=3600_000)
    assert result.start_time <= parse_time("2025-01-01T10:00:00Z")
    # Nothing before --at moves: no what-if admission before the start, and what was admitted then
    # is still admitted with the same assignment (or has finished).
    assert all(t >= result.start_time for t in result.whatif_admit.values())
    assert result.state is not None
    for key, admission in admitted_before.items():
        assert key not in result.queue_of
        rec = result.state.workloads[key]
        assert rec.finished or rec.admission == admission
    rows = {r["clusterQueue"]: r for r in queue_table(result)}
    b = rows["team-b-cq"]
    assert b["admittedWhatIf"] > b["admittedReal"]
    both = [k for k, q in result.queue_of.items() if q == "team-b-cq" and k in result.real_admit
            and k in result.whatif_admit]
    assert both
    assert sum(result.whatif_admit[k] for k in both) < sum(result.real_admit[k] for k in both)
    assert all(result.whatif_admit[k] <= result.real_admit[k] for k in both)
    doc = to_json(result)
    assert doc["from"]["inputOffset"] == at and doc["changes"] == [str(change)]
    assert "team-b-cq" in "\n".join(report_lines(result))


def test_a_bad_change_is_refused_before_anything_runs(morning: SqliteLog, tmp_path: Path) -> None:
    from events.manifests import ManifestError

    bad = tmp_path / "bad.yaml"
    bad.write_text(MORE_FOR_TEAM_B.replace("nominalQuota: 32", "nominalQuota: -1"))
    with pytest.raises(ManifestError, match="nominalQuota"):
        what_if(morning, T, at=None, changes=[str(bad)], for_ms=None)
