"""Identities from client certificates and the impersonation headers that carry them upstream."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from enclave_proxy.identity import (
    Identity,
    ImpersonationRefusedError,
    asks_impersonation,
    bearer_token,
    from_certificate,
    impersonation_headers,
    requested_identity,
)


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
    assert asks_impersonation([(b"Accept", b"*/*"), (b"IMPERSONATE-GROUP", b"g")])
    assert asks_impersonation([(b"impersonate-user", b"u")])
    assert asks_impersonation([(b"Impersonate-Extra-Scopes", b"x")])
    assert not asks_impersonation([(b"Accept", b"*/*"), (b"Impersonat", b"x"), (b"X-Impersonate-User", b"u")])
    assert not asks_impersonation([])


def test_requested_identity_is_built_as_kube_apiserver_builds_it() -> None:
    headers = CIMultiDict([("Impersonate-User", "system:serviceaccount:ns:sa"), ("Impersonate-Extra-Scopes%2Fa", "x")])
    wanted = requested_identity(CIMultiDictProxy(headers))
    assert wanted is not None
    assert wanted.identity.groups == ("system:serviceaccounts", "system:serviceaccounts:ns", "system:authenticated")
    assert wanted.identity.extra == (("scopes/a", ("x",)),)
    checks = [dict(check) for check in wanted.checks]
    # the service account and the extra are checked; the groups kube-apiserver adds by itself are not
    assert checks == [
        {"namespace": "ns", "resource": "serviceaccounts", "name": "sa", "verb": "impersonate"},
        {
            "group": "authentication.k8s.io",
            "resource": "userextras",
            "subresource": "scopes/a",
            "name": "x",
            "verb": "impersonate",
        },
    ]
    assert requested_identity(CIMultiDictProxy(CIMultiDict())) is None


def test_every_group_asked_for_is_checked_even_system_authenticated() -> None:
    headers = CIMultiDict([("Impersonate-User", "system:anonymous"), ("Impersonate-Group", "system:authenticated")])
    wanted = requested_identity(CIMultiDictProxy(headers))
    assert wanted is not None
    assert {"resource": "groups", "name": "system:authenticated", "verb": "impersonate"} in [
        dict(check) for check in wanted.checks
    ]


def test_groups_without_a_user_are_refused() -> None:
    with pytest.raises(ImpersonationRefusedError, match="need Impersonate-User"):
        requested_identity(CIMultiDictProxy(CIMultiDict([("Impersonate-Group", "system:masters")])))
