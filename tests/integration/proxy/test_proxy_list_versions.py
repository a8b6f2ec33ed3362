"""A tenant owner's namespace list through enclave-proxy honours ``resourceVersion`` and ``resourceVersionMatch``
as kube-apiserver does: ``Exact`` answers the list of that version (client-go pins a paginated relist to it),
``NotOlderThan`` the newest, and the combinations kube-apiserver refuses are refused with its 422. The proxy used
to ignore both and always answer the newest list."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from enclave_testing.waiting import poll

from .conftest import Caller, ProxyStack


def listed(proxied: ProxyStack, owner: Caller, query: str = "") -> tuple[int, dict[str, Any]]:
    """The owner's ``GET /api/v1/namespaces?<query>`` through the proxy: the code and the JSON body."""
    context = ssl.create_default_context(cafile=str(proxied.ca_file))
    request = urllib.request.Request(
        f"{proxied.url}/api/v1/namespaces{'?' + query if query else ''}",
        headers={"Authorization": f"Bearer {owner.token}", "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as answer:
            return int(answer.status), json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def names(body: dict[str, Any]) -> set[str]:
    return {item["metadata"]["name"] for item in body.get("items") or []}


def test_an_exact_list_is_the_list_of_that_version(proxied: ProxyStack, caller: Callable[[str], Caller]) -> None:
    owner = caller("owner-rv")
    _, first = proxied.tenant_of(owner, 1)

    def first_listed() -> dict[str, Any] | None:
        code, body = listed(proxied, owner)
        return body if code == 200 and names(body) == set(first) else None

    version = poll(first_listed, what="the owner's first namespace through the proxy")["metadata"]["resourceVersion"]
    later = f"{first[0]}-later"
    proxied.add_namespace(owner, later)
    poll(lambda: names(listed(proxied, owner)[1]) == {*first, later}, what="the owner's second namespace")

    code, exact = listed(proxied, owner, f"resourceVersion={version}&resourceVersionMatch=Exact")
    assert code == 200, exact
    assert names(exact) == set(first)
    assert exact["metadata"]["resourceVersion"] == version
    code, newest = listed(proxied, owner, f"resourceVersion={version}&resourceVersionMatch=NotOlderThan")
    assert code == 200, newest
    assert names(newest) == {*first, later}


def test_list_versions_kube_apiserver_refuses_are_refused(proxied: ProxyStack, caller: Callable[[str], Caller]) -> None:
    owner = caller("owner-rv-bad")
    proxied.tenant_of(owner, 0)
    for query, message in (
        ("resourceVersionMatch=Exact", "forbidden unless resourceVersion is provided"),
        ("resourceVersion=0&resourceVersionMatch=Exact", 'forbidden for resourceVersion "0"'),
        ("resourceVersion=1&resourceVersionMatch=Newest", "Unsupported value"),
    ):
        code, body = listed(proxied, owner, query)
        assert (code, body.get("reason")) == (422, "Invalid"), (query, body)
        assert message in body["message"]
    code, body = listed(proxied, owner, "resourceVersion=1&resourceVersionMatch=Exact")
    assert (code, body.get("reason")) == (410, "Expired"), body
