"""primus.runtime.placement_proto: every backend's placement block goes spec -> proto -> spec unchanged, over the wire too."""

from __future__ import annotations

from typing import Any

import pytest

from primus.runtime.placement_proto import placement_of_proto, placement_to_proto
from primus.spec.backend_kinds import BackendKind
from primus.spec.resources import KubernetesPlacement, RayPlacement, Resources, SlurmPlacement, YarnPlacement, placement_dict
from primus.v1 import resource_controller_pb2 as rc_pb2

FULL_BLOCKS: dict[str, dict[str, Any]] = {
    "kubernetes": {
        "image": "registry.example/primus:1.2",
        "nodeSelector": {"pool": "cpu", "zone": "a"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "primus", "effect": "NoExecute", "tolerationSeconds": 300}],
        "serviceAccountName": "primus-executor",
        "env": {"OMP_NUM_THREADS": "2"},
        "volumes": [
            {"name": "runs", "persistentVolumeClaim": {"claimName": "primus-runs", "readOnly": False}},
            {"name": "conf", "configMap": {"name": "primus-conf", "defaultMode": 420, "items": [{"key": "a", "path": "a.yaml"}]}},
            {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}},
        ],
        "volumeMounts": [{"name": "runs", "mountPath": "/runs"}, {"name": "conf", "mountPath": "/etc/primus", "readOnly": True}],
        "pendingTimeoutSeconds": 30.5,
        "resizeTimeoutSeconds": 90,
    },
    "yarn": {"queue": "training", "nodeLabel": "gpu"},
    "ray": {"resources": {"data_node": 1, "fast_disk": 0.5}, "roleResources": {"dataExecutor": {"host2": 1}, "trainer": {}}, "rankStrategy": "STRICT_SPREAD"},
    "slurm": {"partition": "cpu", "rolePartitions": {"trainer": "gpu"}, "qos": "normal", "roleQos": {"dataExecutor": "low", "trainer": "high"}},
}
BACKENDS = [BackendKind.KUBERNETES, BackendKind.YARN, BackendKind.RAY, BackendKind.SLURM]


def _resources(backend: BackendKind, block: dict[str, Any] | None) -> Resources:
    return Resources.model_validate({"backend": backend.value, **({backend.value: block} if block is not None else {})})


def _round_trip(resources: Resources) -> Any:
    """Through a LaunchExecutorsRequest's bytes, as the master sends it to the controller."""
    sent = rc_pb2.LaunchExecutorsRequest(placement=placement_to_proto(resources)).SerializeToString()
    return placement_of_proto(rc_pb2.LaunchExecutorsRequest.FromString(sent).placement)


@pytest.mark.parametrize("backend", BACKENDS, ids=str)
def test_a_full_block_comes_back_equal(backend: BackendKind) -> None:
    resources = _resources(backend, FULL_BLOCKS[backend.value])
    back = _round_trip(resources)
    assert back == resources.placement_block()
    assert placement_dict(back) == resources.placement(), "the backends would read another block"


@pytest.mark.parametrize("backend", BACKENDS, ids=str)
@pytest.mark.parametrize("block", [None, {}], ids=["left-out", "empty"])
def test_a_default_block_comes_back_equal(backend: BackendKind, block: dict[str, Any] | None) -> None:
    resources = _resources(backend, block)
    back = _round_trip(resources)
    assert back is not None and back == resources.placement_block()
    assert placement_dict(back) == resources.placement()


def test_kubernetes_objects_keep_their_integers() -> None:
    """A Struct holds numbers as doubles: tolerationSeconds and defaultMode come back as the ints Kubernetes needs."""
    back = _round_trip(_resources(BackendKind.KUBERNETES, FULL_BLOCKS["kubernetes"]))
    assert isinstance(back, KubernetesPlacement)
    seconds = back.tolerations[0]["tolerationSeconds"]
    mode = back.volumes[1]["configMap"]["defaultMode"]
    assert (seconds, type(seconds), mode, type(mode)) == (300, int, 420, int)
    assert back.volumes[0]["persistentVolumeClaim"]["readOnly"] is False


def test_local_carries_no_block() -> None:
    resources = _resources(BackendKind.LOCAL, None)
    assert placement_to_proto(resources).WhichOneof("placement") is None
    assert _round_trip(resources) is None and placement_dict(None) == resources.placement() == {}


def test_each_block_goes_in_its_own_field_of_the_oneof() -> None:
    kinds = {backend: placement_to_proto(_resources(backend, FULL_BLOCKS[backend.value])).WhichOneof("placement") for backend in BACKENDS}
    assert kinds == {backend: backend.value for backend in BACKENDS}
    types = {type(_round_trip(_resources(backend, None))) for backend in BACKENDS}
    assert types == {KubernetesPlacement, YarnPlacement, RayPlacement, SlurmPlacement}


def test_a_message_that_breaks_the_spec_is_refused() -> None:
    with pytest.raises(ValueError, match="executor role 0"):
        placement_of_proto(rc_pb2.Placement(slurm=rc_pb2.SlurmPlacement(role_qos=[rc_pb2.SlurmRoleName(name="high")])))
    with pytest.raises(ValueError, match="rank strategy 9"):
        placement_of_proto(rc_pb2.Placement(ray=rc_pb2.RayPlacement(rank_strategy=9)))  # type: ignore[arg-type]
    with pytest.raises(ValueError) as refused:
        placement_of_proto(rc_pb2.Placement(kubernetes=rc_pb2.KubernetesPlacement(pending_timeout_seconds=1)))
    assert str(refused.value) == "resources.kubernetes.pendingTimeoutSeconds: Input should be greater than or equal to 5, not 1.0"
