"""The Capsule peer of the side-by-side benchmark is installed as its chart says (enclave_testing.capsule).

No control plane: the pinned module's chart rendered with helm, checked for what makes the comparison fair
(chart-default manager flags, the chart's webhooks behind our URL client) and the CRD conversion patches.
"""

from __future__ import annotations

import base64
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from enclave_testing import capsule

pytestmark = pytest.mark.skipif(shutil.which("go") is None, reason="the Go toolchain fetches Capsule's module")

URL = "https://127.0.0.1:9443"
CA = b"-----BEGIN CERTIFICATE-----\nnot checked here\n-----END CERTIFICATE-----\n"


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    return capsule.render_chart(URL, CA)


def _configuration(rendered: list[dict[str, Any]]) -> dict[str, Any]:
    return next(doc for doc in rendered if doc["kind"] == "CapsuleConfiguration")


def test_manager_runs_with_the_chart_default_flags(rendered: list[dict[str, Any]]) -> None:
    args = capsule.chart_args(rendered)
    assert "--client-connection-qps=20" in args
    assert "--client-connection-burst=30" in args
    assert "--workers=1" in args
    assert "--configuration-name=default" in args


def test_webhooks_are_the_charts_behind_the_url_client(rendered: list[dict[str, Any]]) -> None:
    admission = _configuration(rendered)["spec"]["admission"]
    validating = admission["validating"]
    assert validating["client"] == {"url": URL, "caBundle": base64.b64encode(CA).decode()}
    hooks = {hook["name"]: hook for hook in validating["webhooks"]}
    namespaces = hooks["namespaces.validating.projectcapsule.dev"]
    assert namespaces["path"] == "/namespaces/validating"
    assert namespaces["failurePolicy"] == "Fail"
    assert _configuration(rendered)["spec"]["users"] == [{"kind": "Group", "name": capsule.USERS_GROUP}]


def test_crds_carry_the_chart_conversion_patch(tmp_path: Path) -> None:
    source = capsule.module_dir()
    out = capsule.patched_crds(source, URL, CA, tmp_path)
    tenants = yaml.safe_load((out / "capsule.clastix.io_tenants.yaml").read_text())
    client_config = tenants["spec"]["conversion"]["webhook"]["clientConfig"]
    assert client_config["url"] == f"{URL}/convert"
    namespaces = yaml.safe_load((out / "capsule.clastix.io_rulestatuses.yaml").read_text())
    assert "conversion" not in namespaces["spec"]
