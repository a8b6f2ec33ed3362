"""``/convert`` on the admission listener: ConversionReviews answered without snapshots, all or nothing."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import ClientSession
from prometheus_client import REGISTRY

from enclave_admission.server import AdmissionServer
from enclave_admission.state import State
from enclave_core.api.conversion import HUB, SPOKE
from enclave_testing.examples import example
from enclave_testing.examples_v1beta1 import example_v1beta1


@contextlib.asynccontextmanager
async def client() -> AsyncIterator[ClientSession]:
    """A listener with an empty (never ready) state: conversion must not need snapshots."""
    server = AdmissionServer(State())
    await server.start("127.0.0.1", 0, None)
    try:
        async with ClientSession(base_url=f"http://127.0.0.1:{server.port}") as session:
            yield session
    finally:
        await server.stop()


def _review(target: str, *objects: dict[str, object]) -> dict[str, object]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "c-1", "desiredAPIVersion": target, "objects": list(objects)},
    }


async def test_converts_before_the_snapshots_arrive() -> None:
    async with client() as session:
        answer = await session.post("/convert", json=_review(SPOKE, example("Tenant"), example("TenantOwner")))
        assert answer.status == 200
        data = await answer.json()
    assert data["kind"] == "ConversionReview"
    assert data["response"]["uid"] == "c-1"
    assert data["response"]["result"] == {"status": "Success"}
    tenant, owner = data["response"]["convertedObjects"]
    assert tenant["apiVersion"] == owner["apiVersion"] == SPOKE
    assert tenant["spec"]["namespaceQuota"] == 3


async def test_one_bad_object_fails_the_whole_review() -> None:
    bad = example_v1beta1("ServiceConfiguration")
    bad["spec"]["userGroups"] = [f"g{i}" for i in range(257)]
    before = REGISTRY.get_sample_value("enclave_admission_conversions_total", {"to": HUB, "result": "refused"}) or 0
    async with client() as session:
        data = await (await session.post("/convert", json=_review(HUB, example_v1beta1("Tenant"), bad))).json()
    assert data["response"]["result"]["status"] == "Failure"
    assert "spec.userGroups" in data["response"]["result"]["message"]
    assert "convertedObjects" not in data["response"]
    after = REGISTRY.get_sample_value("enclave_admission_conversions_total", {"to": HUB, "result": "refused"})
    assert after == before + 1


async def test_malformed_reviews_and_methods_are_errors() -> None:
    async with client() as session:
        assert (await session.post("/convert", data=b"{not json")).status == 400
        assert (await session.post("/convert", json={"kind": "ConversionReview"})).status == 400
        assert (await session.post("/convert", json=[1, 2])).status == 400
        assert (await session.get("/convert")).status == 405
        unknown = await session.post("/nowhere", json={})
        assert unknown.status == 404
        assert "/convert" in (await unknown.json())["error"]
