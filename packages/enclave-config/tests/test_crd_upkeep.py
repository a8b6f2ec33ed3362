"""enclave-config's CRD upkeep as pure functions: the conversion client it wants, the patch, the migration plan."""

from __future__ import annotations

import base64
from typing import Any

from enclave_config.crds import conversion_patch, migration
from enclave_core.api import kind_info
from enclave_core.api.configuration import ServiceConfigurationSpec
from enclave_core.api.crdgen import crd_for

CA = b"-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n"


def _spec(client: dict[str, Any] | None) -> ServiceConfigurationSpec:
    if client is None:
        return ServiceConfigurationSpec()
    return ServiceConfigurationSpec.model_validate({"admission": {"validating": {"client": client}}})


def test_a_url_client_gets_convert_appended_and_the_ca() -> None:
    crd = crd_for(kind_info("Tenant"))
    patch = conversion_patch(crd, _spec({"url": "https://127.0.0.1:9443/"}), CA)
    assert patch == {
        "spec": {
            "conversion": {
                "webhook": {
                    "clientConfig": {
                        "url": "https://127.0.0.1:9443/convert",
                        "caBundle": base64.b64encode(CA).decode(),
                        "service": None,
                    }
                }
            }
        }
    }


def test_a_service_client_keeps_its_path_prefix_and_port() -> None:
    crd = crd_for(kind_info("Tenant"))
    client = {
        "service": {"name": "hooks", "namespace": "tenancy", "path": "/enclave", "port": 8443},
        "caBundle": "Y2E=",
    }
    patch = conversion_patch(crd, _spec(client), CA)
    assert patch is not None
    config = patch["spec"]["conversion"]["webhook"]["clientConfig"]
    assert config == {
        "service": {"name": "hooks", "namespace": "tenancy", "path": "/enclave/convert", "port": 8443},
        "caBundle": "Y2E=",
    }


def test_nothing_to_do_when_the_crd_already_says_it() -> None:
    crd = crd_for(kind_info("Tenant"))
    patch = conversion_patch(crd, _spec(None), CA)
    assert patch is not None, "without admission only the CA is injected"
    assert set(patch["spec"]["conversion"]["webhook"]["clientConfig"]) == {"service", "caBundle"}
    crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"] = base64.b64encode(CA).decode()
    assert conversion_patch(crd, _spec(None), CA) is None
    assert conversion_patch(crd, _spec(None), None) is None


def test_crds_without_a_conversion_webhook_are_left_alone() -> None:
    crd = crd_for(kind_info("Tenant"))
    crd["spec"]["conversion"] = {"strategy": "None"}
    assert conversion_patch(crd, _spec({"url": "https://127.0.0.1:1/"}), CA) is None


def test_migration_is_planned_only_for_stale_stored_versions() -> None:
    crd = crd_for(kind_info("CustomQuota"))
    crd["status"] = {"storedVersions": ["v1beta2"]}
    assert migration(crd) is None
    crd["status"] = {"storedVersions": ["v1beta1", "v1beta2"]}
    plan = migration(crd)
    assert plan is not None
    assert plan.stale == ("v1beta1",)
    assert plan.list_path == "/apis/enclave.dev/v1beta2/customquotas"
    assert plan.object_path({"metadata": {"name": "q", "namespace": "team"}}) == (
        "/apis/enclave.dev/v1beta2/namespaces/team/customquotas/q"
    )
    assert plan.status_path == "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/customquotas.enclave.dev/status"


def test_definitions_are_applied_once_per_release() -> None:
    from enclave_config.crds import definitions
    from enclave_core.api.names import CRD_DIGEST_ANNOTATION

    spec = _spec({"url": "https://127.0.0.1:9443"})
    first = definitions({}, spec, CA)
    assert len(first) == 12, "every CRD missing: every CRD applied"
    tenant = first["tenants.enclave.dev"]
    assert [v["name"] for v in tenant["spec"]["versions"]] == ["v1beta1", "v1beta2"]
    assert tenant["spec"]["conversion"]["webhook"]["clientConfig"]["url"] == "https://127.0.0.1:9443/convert"
    assert definitions(first, spec, CA) == {}, "stamped with this release's digest: nothing to do"
    older = {
        name: {**body, "metadata": {**body["metadata"], "annotations": {CRD_DIGEST_ANNOTATION: "0"}}}
        for name, body in first.items()
    }
    assert sorted(definitions(older, spec, CA)) == sorted(first)
