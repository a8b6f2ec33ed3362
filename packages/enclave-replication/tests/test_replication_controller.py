"""The controller's pure helpers: policy conditions, the orphan patch and owner names."""

from __future__ import annotations

from datetime import UTC, datetime

from enclave_replication.apply import _condition, _orphan_patch
from enclave_replication.names import Owner

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_conditions_see_the_destination_and_the_time() -> None:
    assert _condition("object == null", None, NOW) is True
    assert _condition("object == null", {"metadata": {"name": "x"}}, NOW) is False
    assert _condition("now > timestamp('2025-01-01T00:00:00Z')", None, NOW) is True
    assert isinstance(_condition("object.metadata.name == 'x'", None, NOW), str)  # an error: no write
    assert isinstance(_condition("object ==", None, NOW), str)  # does not compile
    assert isinstance(_condition("1", None, NOW), str)  # not a bool


def test_the_orphan_patch_strips_only_our_marks_and_ownership() -> None:
    owner = Owner("GlobalTenantResource", "g")
    obj = {
        "metadata": {
            "resourceVersion": "7",
            "labels": {"enclave.dev/managed-by": "enclave-replication", "app": "x"},
            "annotations": {"enclave.dev/replicated-by": owner.key, "enclave.dev/replication-hash": "h", "note": "n"},
            "managedFields": [{"manager": owner.field_manager}, {"manager": "kubectl"}],
        }
    }
    assert _orphan_patch(obj, owner) == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
        {"op": "remove", "path": "/metadata/labels/enclave.dev~1managed-by"},
        {"op": "remove", "path": "/metadata/annotations/enclave.dev~1replicated-by"},
        {"op": "remove", "path": "/metadata/annotations/enclave.dev~1replication-hash"},
        {"op": "replace", "path": "/metadata/managedFields", "value": [{"manager": "kubectl"}]},
    ]


def test_owner_keys_and_field_managers() -> None:
    local = Owner("TenantResource", "r", "ns")
    assert Owner.parse(local.key) == local
    assert Owner.parse("GlobalTenantResource/g") == Owner("GlobalTenantResource", "g")
    assert Owner.parse("Other/x") is None
    assert local.field_manager == "enclave-replication/tr/ns.r"
    long = Owner("GlobalTenantResource", "x" * 253)
    assert len(long.field_manager) <= 128
    assert long.field_manager != Owner("GlobalTenantResource", "x" * 252 + "y").field_manager
