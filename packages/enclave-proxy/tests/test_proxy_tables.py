"""The Table kubectl prints, as kube-apiserver renders it for namespaces."""

from __future__ import annotations

import datetime

import pytest

from enclave_proxy.tables import NAMESPACE_TABLE, NODE_TABLE, accepts_json, human_duration, table, wants_table

KUBECTL_ACCEPT = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)


def test_kubectl_get_asks_for_a_v1_table() -> None:
    assert wants_table(KUBECTL_ACCEPT) == "v1"
    assert wants_table("application/json;as=Table;v=v1beta1;g=meta.k8s.io") == "v1beta1"
    assert wants_table("application/json") is None


def test_json_must_be_acceptable() -> None:
    assert accepts_json("")
    assert accepts_json("application/vnd.kubernetes.protobuf, application/json")
    assert not accepts_json("application/vnd.kubernetes.protobuf")


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (-5, "<invalid>"),
        (5, "5s"),
        (119, "119s"),
        (150, "2m30s"),
        (600, "10m"),
        (3 * 3600 + 60, "3h1m"),
        (10 * 3600, "10h"),
        (3 * 86400 + 3600, "3d1h"),
        (30 * 86400, "30d"),
        (3 * 365 * 86400 + 86400, "3y1d"),
    ],
)
def test_age_is_kubes_human_duration(seconds: int, shown: str) -> None:
    assert human_duration(seconds) == shown


def test_rows_carry_name_status_age_and_metadata() -> None:
    now = datetime.datetime(2026, 1, 1, 0, 10, tzinfo=datetime.UTC)
    obj = {"metadata": {"name": "a", "creationTimestamp": "2026-01-01T00:00:00Z"}, "status": {"phase": "Active"}}
    rendered = table(NAMESPACE_TABLE, [obj], version="v1", include="Metadata", now=now, resource_version="7")
    assert [c["name"] for c in rendered["columnDefinitions"]] == ["Name", "Status", "Age"]
    assert rendered["rows"][0]["cells"] == ["a", "Active", "10m"]
    assert rendered["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    assert rendered["metadata"]["resourceVersion"] == "7"
    bare = table(NAMESPACE_TABLE, [obj], version="v1", include="None", now=now, columns=False)
    assert "object" not in bare["rows"][0]
    assert bare["columnDefinitions"] is None


def test_node_rows_as_kubectl_prints_them() -> None:
    now = datetime.datetime(2026, 1, 1, 0, 0, 30, tzinfo=datetime.UTC)
    node = {
        "metadata": {
            "name": "n1",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/gpu": ""},
        },
        "spec": {"unschedulable": True},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.35.4"}},
    }
    rendered = table(NODE_TABLE, [node], version="v1", include="None", now=now)
    assert [c["name"] for c in rendered["columnDefinitions"]] == ["Name", "Status", "Roles", "Age", "Version"]
    assert rendered["rows"][0]["cells"] == ["n1", "Ready,SchedulingDisabled", "gpu,worker", "30s", "v1.35.4"]
