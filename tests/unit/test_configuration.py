"""Kueue's Configuration per version, field by field (events/configuration.py).

Each expectation is what Kueue v0.19 makes of the same file: its defaults.go for the version,
then (v1beta1) the conversion to v1beta2, then pkg/config/validation.go.
"""

from __future__ import annotations

from typing import Any

import pytest

from events import objects as o
from events.manifests import Document, ManifestError, normalize, read_documents

V1BETA1 = "config.kueue.x-k8s.io/v1beta1"
V1BETA2 = "config.kueue.x-k8s.io/v1beta2"
OFF = o.Configuration()
# What a v1beta2 file gets without saying anything about waitForPodsReady (Kueue >= 0.19).
V1BETA2_WAIT_ON = {"wait_for_pods_ready": True, "wait_for_pods_ready_timeout_ms": 1_800_000,
                   "wait_for_pods_ready_block_admission": False}


def _config(api_version: str, **fields: Any) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": "Configuration", **fields}


def _read(body: dict[str, Any]) -> o.Configuration:
    cfg = normalize(Document("config.yaml", 1, body))
    assert isinstance(cfg, o.Configuration)
    return cfg


def _refuse(body: dict[str, Any]) -> ManifestError:
    with pytest.raises(ManifestError) as err:
        normalize(Document("config.yaml", 1, body))
    return err.value


def test_the_fair_sharing_configuration_of_kueues_preemption_docs_turns_fair_sharing_on():
    # Verbatim from Kueue's site/content/en/docs/concepts/preemption.md (issue #22).
    text = ("apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nfairSharing:\n"
            "  preemptionStrategies: [LessThanOrEqualToFinalShare, LessThanInitialShare]\n")
    cfg = normalize(read_documents("config.yaml", text)[0])
    assert cfg == o.Configuration(fair_sharing=True, **V1BETA2_WAIT_ON)


def test_a_v1beta2_wait_for_pods_ready_block_with_only_a_timeout_is_on():
    # The second example of issue #22.
    text = "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nwaitForPodsReady: {timeout: 5m}\n"
    cfg = normalize(read_documents("config.yaml", text)[0])
    assert cfg == o.Configuration(wait_for_pods_ready=True, wait_for_pods_ready_timeout_ms=300_000,
                                  wait_for_pods_ready_block_admission=False)


@pytest.mark.parametrize(
    ("body", "want"),
    [
        # --- fairSharing ---
        pytest.param(_config(V1BETA1), OFF, id="v1beta1: no fairSharing block, fair sharing off"),
        pytest.param(_config(V1BETA1, fairSharing={}), OFF,
                     id="v1beta1: an empty block is off (enable defaults false)"),
        pytest.param(_config(V1BETA1, fairSharing={"preemptionStrategies": ["LessThanInitialShare"]}), OFF,
                     id="v1beta1: strategies without enable leave fair sharing off"),
        pytest.param(_config(V1BETA1, fairSharing={"enable": True}), o.Configuration(fair_sharing=True),
                     id="v1beta1: enable alone takes both strategies by default"),
        pytest.param(_config(V1BETA1, fairSharing={"enable": True, "preemptionStrategies": ["LessThanInitialShare"]}),
                     o.Configuration(fair_sharing=True, fair_sharing_strategies=("LessThanInitialShare",)),
                     id="v1beta1: enable with one strategy"),
        pytest.param(_config(V1BETA1, fairSharing={"enable": False, "preemptionStrategies": ["Fairest"]}), OFF,
                     id="v1beta1: a disabled block is dropped unvalidated, as Kueue's conversion drops it"),
        pytest.param(_config(V1BETA2, fairSharing={"preemptionStrategies": ["LessThanOrEqualToFinalShare"]}),
                     o.Configuration(fair_sharing=True, fair_sharing_strategies=("LessThanOrEqualToFinalShare",),
                                     **V1BETA2_WAIT_ON),
                     id="v1beta2: the block being there turns fair sharing on"),
        pytest.param(_config(V1BETA2), o.Configuration(**V1BETA2_WAIT_ON), id="v1beta2: no block, fair sharing off"),
        # --- waitForPodsReady ---
        pytest.param(_config(V1BETA1, waitForPodsReady={"timeout": "10m"}), OFF,
                     id="v1beta1: a block without enable is off"),
        pytest.param(_config(V1BETA1, waitForPodsReady={"enable": True}),
                     o.Configuration(wait_for_pods_ready=True, wait_for_pods_ready_timeout_ms=300_000,
                                     wait_for_pods_ready_block_admission=True),
                     id="v1beta1: enable alone: timeout 5m and blockAdmission true by default"),
        pytest.param(_config(V1BETA1, waitForPodsReady={"enable": True, "timeout": "1h30m", "blockAdmission": False}),
                     o.Configuration(wait_for_pods_ready=True, wait_for_pods_ready_timeout_ms=5_400_000),
                     id="v1beta1: an explicit timeout and blockAdmission false"),
        pytest.param(_config(V1BETA2, waitForPodsReady={}), o.Configuration(**V1BETA2_WAIT_ON),
                     id="v1beta2: an empty block is on with timeout 30m and blockAdmission false"),
        pytest.param(_config(V1BETA2, waitForPodsReady={"timeout": "0s"}), o.Configuration(**V1BETA2_WAIT_ON),
                     id="v1beta2: a timeout of 0 is defaulted to 30m"),
        pytest.param(_config(V1BETA2, waitForPodsReady={"timeout": "2m", "blockAdmission": True}),
                     o.Configuration(wait_for_pods_ready=True, wait_for_pods_ready_timeout_ms=120_000,
                                     wait_for_pods_ready_block_admission=True),
                     id="v1beta2: an explicit timeout and blockAdmission true"),
        pytest.param(_config(V1BETA2, waitForPodsReady={"timeout": "2m"},
                             featureGates={"DisableWaitForPodsReady": True}), OFF,
                     id="v1beta2: the DisableWaitForPodsReady gate turns it off"),
        pytest.param(_config(V1BETA1, waitForPodsReady={"enable": True},
                             featureGates={"DisableWaitForPodsReady": True}), OFF,
                     id="v1beta1: the DisableWaitForPodsReady gate turns it off too"),
        pytest.param(_config(V1BETA2, featureGates={"DisableWaitForPodsReady": False}),
                     o.Configuration(**V1BETA2_WAIT_ON),
                     id="v1beta2: DisableWaitForPodsReady false changes nothing"),
        pytest.param(_config(V1BETA2, waitForPodsReady={"requeuingStrategy": {"timestamp": "Creation",
                                                                             "backoffLimitCount": 3}}),
                     o.Configuration(requeuing_timestamp="Creation", requeuing_backoff_limit_count=3,
                                     **V1BETA2_WAIT_ON), id="v1beta2: a valid requeuingStrategy is accepted"),
        pytest.param(_config(V1BETA2, waitForPodsReady={"recoveryTimeout": "3m", "requeuingStrategy": {
                                 "backoffBaseSeconds": 10, "backoffMaxSeconds": 100}}),
                     o.Configuration(wait_for_pods_ready_recovery_timeout_ms=180_000, requeuing_backoff_base_seconds=10,
                                     requeuing_backoff_max_seconds=100, **V1BETA2_WAIT_ON),
                     id="v1beta2: recoveryTimeout and the back-off's base and cap are kept"),
        pytest.param(_config(V1BETA1, waitForPodsReady={"enable": True}),
                     o.Configuration(wait_for_pods_ready=True, wait_for_pods_ready_timeout_ms=300_000,
                                     wait_for_pods_ready_block_admission=True, requeuing_timestamp="Eviction",
                                     requeuing_backoff_limit_count=None, requeuing_backoff_base_seconds=60,
                                     requeuing_backoff_max_seconds=3600),
                     id="v1beta1: Kueue's defaults: 5m, blockAdmission, Eviction, 60s doubling to 3600s, no limit"),
        # --- resources.excludeResourcePrefixes ---
        pytest.param(_config(V1BETA1, resources={"excludeResourcePrefixes": ["example.com/"]}),
                     o.Configuration(exclude_resource_prefixes=("example.com/",)),
                     id="v1beta1: excludeResourcePrefixes in order"),
        pytest.param(_config(V1BETA2, resources={"excludeResourcePrefixes": ["b/", "a/"]}),
                     o.Configuration(exclude_resource_prefixes=("b/", "a/"), **V1BETA2_WAIT_ON),
                     id="v1beta2: excludeResourcePrefixes in order"),
        pytest.param(_config(V1BETA2, resources={}), o.Configuration(**V1BETA2_WAIT_ON),
                     id="v1beta2: no prefixes: every resource counts"),
        # --- featureGates and the knobs that do not change decisions ---
        pytest.param(_config(V1BETA2, featureGates={"FlavorFungibilityPreserveScanProgress": False}),
                     o.Configuration(flavor_fungibility_preserve_scan_progress=False, **V1BETA2_WAIT_ON),
                     id="v1beta2: the scan-progress gate switched off"),
        pytest.param(_config(V1BETA1, manageJobsWithoutQueueName=False,
                             integrations={"frameworks": ["batch/job"]}), OFF,
                     id="v1beta1: knobs that do not change decisions are accepted and ignored"),
        # --- admissionFairSharing: on when the block is there, in both versions ---
        pytest.param(_config(V1BETA1, admissionFairSharing={}),
                     o.Configuration(admission_fair_sharing=True),
                     id="v1beta1: an empty admissionFairSharing block: on, interval 5m, half-life 0"),
        pytest.param(_config(V1BETA2, admissionFairSharing={"usageHalfLifeTime": "168h",
                                                            "usageSamplingInterval": "0s",
                                                            "resourceWeights": {"memory": 1, "cpu": 2.0}}),
                     o.Configuration(admission_fair_sharing=True, afs_usage_half_life_ms=168 * 3_600_000,
                                     afs_resource_weights=(("cpu", 2.0), ("memory", 1.0)), **V1BETA2_WAIT_ON),
                     id="v1beta2: Kueue's documented block; an interval of 0 takes the default"),
        pytest.param(_config(V1BETA2, admissionFairSharing={"usageSamplingInterval": "30s"},
                             featureGates={"AdmissionFairSharing": False}),
                     o.Configuration(afs_usage_sampling_interval_ms=30_000, **V1BETA2_WAIT_ON),
                     id="v1beta2: the AdmissionFairSharing gate switched off ignores the block"),
        pytest.param(_config(V1BETA2, manageJobsWithoutQueueName=False, namespace="kueue-system"),
                     o.Configuration(**V1BETA2_WAIT_ON),
                     id="v1beta2: knobs that do not change decisions are accepted and ignored"),
    ],
)
def test_configuration_per_version(body, want):
    assert _read(body) == want


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        pytest.param(_config(V1BETA2, fairSharing={"enable": True}), "fairSharing.enable", "unknown field",
                     id="v1beta2: enable is not a field of fairSharing"),
        pytest.param(_config(V1BETA2, fairSharing={}), "fairSharing.preemptionStrategies", "must be specified",
                     id="v1beta2: a fairSharing block needs its strategies (no default)"),
        pytest.param(_config(V1BETA2, fairSharing={"preemptionStrategies": []}), "fairSharing.preemptionStrategies",
                     "must be specified", id="v1beta2: an empty strategy list"),
        pytest.param(_config(V1BETA2, fairSharing={"preemptionStrategies": ["Fairest"]}),
                     "fairSharing.preemptionStrategies[0]", "unsupported value 'Fairest'",
                     id="v1beta2: an unknown strategy"),
        pytest.param(_config(V1BETA1, fairSharing={"enable": True, "preemptionStrategies": [
            "LessThanInitialShare", "LessThanOrEqualToFinalShare"]}), "fairSharing.preemptionStrategies",
                     "unsupported value ['LessThanInitialShare', 'LessThanOrEqualToFinalShare']",
                     id="v1beta1: strategies in an order Kueue does not take"),
        pytest.param(_config(V1BETA2, waitForPodsReady={"enable": False}), "waitForPodsReady.enable", "unknown field",
                     id="v1beta2: enable is not a field of waitForPodsReady"),
        pytest.param(_config(V1BETA1, waitForPodsReady={"enable": True, "timeout": "0s"}), "waitForPodsReady.timeout",
                     "must be specified", id="v1beta1: an explicit timeout of 0 is refused"),
        pytest.param(_config(V1BETA1, waitForPodsReady={"enable": False, "timeout": "soon"}),
                     "waitForPodsReady.timeout", "invalid duration 'soon'",
                     id="v1beta1: a timeout that is not a duration is refused even when off"),
        pytest.param(_config(V1BETA2, waitForPodsReady={"recoveryTimeout": "later"}),
                     "waitForPodsReady.recoveryTimeout", "invalid duration 'later'",
                     id="v1beta2: a recoveryTimeout that is not a duration"),
        pytest.param(_config(V1BETA2, waitForPodsReady={"requeuingStrategy": {"timestamp": "Admission"}}),
                     "waitForPodsReady.requeuingStrategy.timestamp", "supported values: 'Creation', 'Eviction'",
                     id="v1beta2: a requeuing timestamp Kueue does not know"),
        pytest.param(_config(V1BETA1, waitForPodsReady={"enable": True,
                                                        "requeuingStrategy": {"backoffBaseSeconds": -1}}),
                     "waitForPodsReady.requeuingStrategy.backoffBaseSeconds", "must be greater than or equal to 0",
                     id="v1beta1: a negative back-off"),
        pytest.param(_config(V1BETA2, resources={"quotaCheckStrategy": "IgnoreUndeclared"}),
                     "resources.quotaCheckStrategy", "not supported by kueuelog yet",
                     id="v1beta2: quotaCheckStrategy (an alpha gate's field) is not taken"),
        pytest.param(_config(V1BETA2, admissionFairSharing={"usageHalfLifeTime": "-1h"}),
                     "admissionFairSharing.usageHalfLifeTime", "must be greater than or equal to 0",
                     id="v1beta2: a negative usage half-life"),
        pytest.param(_config(V1BETA1, admissionFairSharing={"usageSamplingInterval": "often"}),
                     "admissionFairSharing.usageSamplingInterval", "invalid duration 'often'",
                     id="v1beta1: a sampling interval that is not a duration"),
        pytest.param(_config(V1BETA2, admissionFairSharing={"usageSamplingInterval": "-5m"}),
                     "admissionFairSharing.usageSamplingInterval", "must be greater than or equal to 0",
                     id="v1beta2: a negative sampling interval"),
        pytest.param(_config(V1BETA2, admissionFairSharing={"resourceWeights": {"cpu": -1}}),
                     "admissionFairSharing.resourceWeights.cpu", "must be greater than or equal to 0",
                     id="v1beta2: a negative resource weight"),
        pytest.param(_config(V1BETA2, admissionFairSharing={"resourceWeights": {"cpu": "heavy"}}),
                     "admissionFairSharing.resourceWeights.cpu", "expected a number",
                     id="v1beta2: a resource weight that is not a number"),
    ],
)
def test_invalid_configuration_per_version(body, field, message):
    err = _refuse(body)
    assert (err.obj, err.field) == ("Configuration", field)
    assert message in err.message
