"""Kind -> resource: which plural a kind is served under and whether it is namespaced.

Manifests name kinds; the API serves resources. The answer comes from API discovery (``/api/v1``,
``/apis/<group>/<version>``), cached per group version and fetched again when a kind is missing and the cached
answer is older than :data:`REFRESH_AFTER` seconds (a CRD installed after the controller started).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Final

from enclave_core.kube.rest import Kube, KubeError
from enclave_replication.plan import ReadError

REFRESH_AFTER: Final = 5.0


@dataclass(frozen=True)
class Resource:
    api_version: str
    kind: str
    plural: str
    namespaced: bool
    listable: bool = True

    def collection(self, namespace: str = "") -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            return f"{base}/namespaces/{namespace}/{self.plural}"
        return f"{base}/{self.plural}"

    def path(self, namespace: str, name: str) -> str:
        return f"{self.collection(namespace)}/{name}"


class Discovery:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._kinds: dict[str, dict[str, Resource]] = {}
        self._fetched: dict[str, float] = {}

    async def resource(self, api_version: str, kind: str) -> Resource:
        kinds = self._kinds.get(api_version)
        if kinds is None or (kind not in kinds and time.monotonic() - self._fetched[api_version] > REFRESH_AFTER):
            kinds = await self._fetch(api_version)
        found = kinds.get(kind)
        if found is None:
            raise ReadError("UnknownKind", f"the cluster serves no kind {kind} in {api_version}")
        return found

    async def listable(self, api_version: str) -> list[Resource]:
        """The kinds of ``api_version`` that can be listed, in a stable order, Events left out: they change all
        the time and would wake every reconcile that reads them."""
        kinds = self._kinds.get(api_version)
        if kinds is None or time.monotonic() - self._fetched[api_version] > REFRESH_AFTER:
            kinds = await self._fetch(api_version)
        return [kinds[kind] for kind in sorted(kinds) if kinds[kind].listable and kind != "Event"]

    async def _fetch(self, api_version: str) -> dict[str, Resource]:
        path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        try:
            listing = await self.kube.get(path)
        except KubeError as err:
            if err.not_found:
                listing = {"resources": []}
            else:
                raise ReadError("DiscoveryFailed", f"discovery of {api_version}: {err}") from err
        kinds: dict[str, Resource] = {}
        for entry in listing.get("resources") or ():
            name = str(entry.get("name", ""))
            if "/" in name or not entry.get("kind"):
                continue
            kinds[str(entry["kind"])] = Resource(
                api_version,
                str(entry["kind"]),
                name,
                bool(entry.get("namespaced")),
                listable="list" in (entry.get("verbs") or ()),
            )
        self._kinds[api_version] = kinds
        self._fetched[api_version] = time.monotonic()
        return kinds
