"""Identities from client certificates and the impersonation headers that carry them upstream."""

from __future__ import annotations

from enclave_proxy.identity import Identity, bearer_token, from_certificate, impersonating, impersonation_headers


def test_certificate_subject_gives_user_and_groups() -> None:
    peer = {"subject": ((("organizationName", "team-a"),), (("organizationName", "ops"),), (("commonName", "alice"),))}
    found = from_certificate(peer)
    assert found == Identity("alice", ("team-a", "ops", "system:authenticated"), via="certificate")
    assert from_certificate({"subject": ((("organizationName", "x"),),)}) is None
    assert from_certificate(None) is None


def test_bearer_tokens() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer  abc ") == "abc"
    assert bearer_token("Basic abc") is None
    assert bearer_token("Bearer ") is None
    assert bearer_token("Bearer " + "a" * 20000) is None


def test_impersonation_carries_every_group_and_extra() -> None:
    identity = Identity(
        "system:serviceaccount:ns:sa",
        ("system:serviceaccounts", "system:authenticated"),
        uid="u-1",
        extra=(("authentication.kubernetes.io/pod-name", ("p",)),),
    )
    headers = impersonation_headers(identity)
    assert headers["Impersonate-User"] == "system:serviceaccount:ns:sa"
    assert headers["Impersonate-Uid"] == "u-1"
    assert headers.getall("Impersonate-Group") == ["system:serviceaccounts", "system:authenticated"]
    assert headers.getall("Impersonate-Extra-authentication.kubernetes.io%2Fpod-name") == ["p"]


def test_callers_impersonation_headers_are_found_whatever_their_case() -> None:
    assert impersonating(["Accept", "impersonate-user", "IMPERSONATE-GROUP"]) == [
        "IMPERSONATE-GROUP",
        "impersonate-user",
    ]
