"""What a replication object wants to exist: every desired object, or why an item cannot be produced.

``build`` walks the blocks of a (Global)TenantResource: raw items, copies of namespaced items, and rendered
generators, each placed into every target of its block. Sources and context objects are read through a
:class:`Reader` (the controller's reads run as the acting identity); everything else is pure, so the rules,
above all the TenantResource fence, are unit tested without a cluster.

A bad item never stops the others: it becomes an :class:`ItemProblem` naming its origin
(``resources[0].generators[1]``) and the target, and the rest of the plan is built as usual.

The TenantResource fence, enforced here for every path (raw, copied, generated, templated namespace fields):
no cluster-scoped object, no object in a namespace outside the tenant, no namespaced-item or context read
outside the tenant's namespaces, no cluster-scoped context read.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from enclave_core import selectors
from enclave_core.api.names import (
    ENCLAVE_MANAGED_BY,
    REPLICATION_HASH_ANNOTATION,
    REPLICATION_MANAGER,
    REPLICATION_OWNER_ANNOTATION,
)
from enclave_core.api.replication import (
    ContextResource,
    GlobalTenantResourceSpec,
    ItemPolicy,
    MissingKey,
    NamespacedItem,
    ResourceBlock,
    TenantResourceSpec,
    effective_policy,
)
from enclave_core.kube.rest import JSON
from enclave_replication import templates
from enclave_replication.names import LIFECYCLE_ANNOTATIONS, Owner, content_hash, split_api_version
from enclave_replication.targets import Target

ObjectKey = tuple[str, str, str, str]
"""(group, kind, namespace, name); namespace empty for cluster-scoped objects."""

_SERVER_METADATA = (
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "ownerReferences",
    "finalizers",
    "generateName",
)
_DROPPED_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)


class ReadError(Exception):
    """A source or context read, or a kind lookup, failed: ``reason`` is a CamelCase cause."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class Reader(Protocol):
    """How the plan learns about kinds and reads objects (as the acting identity)."""

    async def namespaced(self, api_version: str, kind: str) -> bool:
        """Whether ``kind`` is namespaced; :class:`ReadError` (``UnknownKind``) when the cluster lacks it."""
        ...

    async def read(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str | None,
        selector: selectors.LabelSelector | None,
    ) -> list[JSON]:
        """The named object (empty when missing) or the selected ones; :class:`ReadError` on failure."""
        ...

    async def kinds(self, api_version: str) -> list[str]:
        """Every kind ``api_version`` serves that can be listed (no subresources, no Events): what ``kind: "*"``
        in a context entry reads. Empty when the cluster does not serve the version."""
        ...


class Renderer(Protocol):
    """How generators are rendered: :class:`enclave_replication.sandbox.RenderPool` in the controller (worker
    processes with budgets), :class:`InProcess` for the unit tests of the plan's own rules."""

    async def render(
        self, template: str, context: Mapping[str, Any], missing_key: str = "zero", party: str = ""
    ) -> list[JSON]:
        """The manifests ``template`` renders to; :class:`templates.RenderError` (with a reason) on failure."""
        ...


class InProcess:
    """Render in this process, with no CPU or memory budget: trusted templates only (tests, tools)."""

    async def render(
        self, template: str, context: Mapping[str, Any], missing_key: str = "zero", party: str = ""
    ) -> list[JSON]:
        del party
        mode: MissingKey = "error" if missing_key == "error" else "invalid" if missing_key == "invalid" else "zero"
        return templates.manifests(templates.render(template, context, mode))


# A context entry's key when it names no ``index``: the kind in lower case, or this for ``kind: "*"``.
EVERY_KIND_INDEX: Final = "all"


@dataclass
class DesiredObject:
    """One object to apply, with the policy of the block it came from."""

    origin: str
    tenant: str
    api_version: str
    kind: str
    name: str
    namespace: str
    body: JSON
    policy: ItemPolicy
    cluster_scoped: bool

    @property
    def group(self) -> str:
        return split_api_version(self.api_version)[0]

    @property
    def version(self) -> str:
        return split_api_version(self.api_version)[1]

    @property
    def key(self) -> ObjectKey:
        return (self.group, self.kind, self.namespace, self.name)


@dataclass
class ItemProblem:
    """An item that could not be produced: the origin and target it came from and why."""

    origin: str
    reason: str
    message: str
    tenant: str = ""
    namespace: str = ""
    kind: str = ""
    name: str = ""
    api_version: str = ""


@dataclass
class Plan:
    objects: dict[ObjectKey, DesiredObject] = field(default_factory=dict)
    problems: list[ItemProblem] = field(default_factory=list)


@dataclass(frozen=True)
class Fence:
    """The namespaces a TenantResource may touch (None: no fence, a GlobalTenantResource)."""

    namespaces: frozenset[str] | None = None
    home: str = ""
    """The TenantResource's own namespace: the default source namespace."""

    @property
    def active(self) -> bool:
        return self.namespaces is not None

    def allows(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces


def _location(target: Target) -> str:
    if target.namespace_name:
        return f"namespace {target.namespace_name}"
    if target.tenant_name:
        return f"tenant {target.tenant_name}"
    return "the cluster"


def strip_source(obj: JSON, selector: selectors.LabelSelector | None) -> JSON:
    """A copy of a source object fit to apply elsewhere: server metadata, status and selector labels gone."""
    result = {key: copy.deepcopy(value) for key, value in obj.items() if key != "status"}
    meta = dict(result.get("metadata") or {})
    for key in _SERVER_METADATA:
        meta.pop(key, None)
    meta.pop("namespace", None)
    labels = dict(meta.get("labels") or {})
    if selector is not None:
        for key in selector.match_labels or {}:
            labels.pop(key, None)
        for requirement in selector.match_expressions or ():
            labels.pop(requirement.key, None)
    labels.pop(ENCLAVE_MANAGED_BY, None)
    annotations = {
        key: value
        for key, value in (meta.get("annotations") or {}).items()
        if key not in LIFECYCLE_ANNOTATIONS and key not in _DROPPED_ANNOTATIONS
    }
    meta["labels"], meta["annotations"] = labels, annotations
    result["metadata"] = meta
    return result


class _Builder:
    def __init__(
        self,
        owner: Owner,
        spec: TenantResourceSpec,
        reader: Reader,
        fence: Fence,
    ) -> None:
        self.owner = owner
        self.spec = spec
        self.reader = reader
        self.fence = fence
        self.plan = Plan()
        self._reads: dict[tuple[str, str, str, str, str], list[JSON]] = {}
        self._scopes: dict[tuple[str, str], bool] = {}
        self._kinds: dict[str, list[str]] = {}

    @property
    def scope(self) -> str:
        return self.spec.scope if isinstance(self.spec, GlobalTenantResourceSpec) else "Namespace"

    async def namespaced(self, api_version: str, kind: str) -> bool:
        key = (api_version, kind)
        if key not in self._scopes:
            self._scopes[key] = await self.reader.namespaced(api_version, kind)
        return self._scopes[key]

    async def kinds(self, api_version: str) -> list[str]:
        if api_version not in self._kinds:
            self._kinds[api_version] = await self.reader.kinds(api_version)
        return self._kinds[api_version]

    async def read(
        self, api_version: str, kind: str, namespace: str, name: str | None, selector: selectors.LabelSelector | None
    ) -> list[JSON]:
        query = selectors.to_label_query(selector) if selector is not None else ""
        key = (api_version, kind, namespace, name or "", query)
        if key not in self._reads:
            self._reads[key] = await self.reader.read(api_version, kind, namespace, name, selector)
        return self._reads[key]

    def problem(self, origin: str, reason: str, message: str, target: Target | None = None, **item: str) -> None:
        self.plan.problems.append(
            ItemProblem(
                origin,
                reason,
                message,
                tenant=target.tenant_name if target else "",
                namespace=target.namespace_name if target else "",
                **item,
            )
        )

    # -- sources -----------------------------------------------------------------------------------------

    async def sources(self, index: int, block: ResourceBlock) -> list[tuple[str, JSON]]:
        """Copies of the block's namespaced items (read once per block, placed into every target)."""
        copies: list[tuple[str, JSON]] = []
        for position, item in enumerate(block.namespaced_items or ()):
            origin = f"resources[{index}].namespacedItems[{position}]"
            try:
                copies += [(origin, strip_source(obj, item.selector)) for obj in await self._source(item)]
            except ReadError as err:
                self.problem(origin, err.reason, err.message, kind=item.kind, name=item.name or "")
        return copies

    async def _source(self, item: NamespacedItem) -> list[JSON]:
        api_version = item.api_version or "v1"
        namespace = item.namespace or (self.fence.home if self.fence.active else "")
        if not namespace:
            raise ReadError("InvalidItem", f"{item.kind}: namespace is required for a GlobalTenantResource")
        if not self.fence.allows(namespace):
            raise ReadError(
                "OutsideTenant",
                f"{item.kind} source namespace {namespace} is not a namespace of this TenantResource's tenant",
            )
        if not await self.namespaced(api_version, item.kind):
            raise ReadError("InvalidItem", f"{item.kind} is cluster-scoped; namespacedItems copies namespaced objects")
        if item.name:
            found = await self.read(api_version, item.kind, namespace, item.name, None)
            if not found and not item.optional:
                raise ReadError("SourceNotFound", f"{item.kind} {namespace}/{item.name} does not exist")
            return found
        if item.selector is None:
            raise ReadError("InvalidItem", f"{item.kind}: give a name or a selector")
        return await self.read(api_version, item.kind, namespace, None, item.selector)

    # -- template context -----------------------------------------------------------------------------------

    async def context(self, index: int, block: ResourceBlock, target: Target) -> dict[str, Any]:
        context: dict[str, Any] = {"tenant": target.tenant, "namespace": target.namespace}
        resources = block.context.resources if block.context else None
        for position, entry in enumerate(resources or ()):
            origin = f"resources[{index}].context.resources[{position}]"
            key = entry.index or (EVERY_KIND_INDEX if entry.kind == "*" else entry.kind.lower())
            context[key] = await self._context_entry(origin, entry, target)
        return context

    async def _context_entry(self, origin: str, entry: ContextResource, target: Target) -> Any:
        api_version = entry.api_version or "v1"
        if entry.kind == "*":
            return await self._every_kind(origin, entry, api_version, target)
        namespaced = await self.namespaced(api_version, entry.kind)
        namespace = self._context_namespace(origin, entry, target, namespaced)
        if entry.name:
            found = await self.read(api_version, entry.kind, namespace, entry.name, None)
            if not found and not entry.optional:
                where = f"{namespace}/{entry.name}" if namespace else entry.name
                raise ReadError("SourceNotFound", f"{origin}: {entry.kind} {where} does not exist")
            return found[0] if found else None
        selector = entry.selector if entry.selector is not None else selectors.LabelSelector()
        return await self.read(api_version, entry.kind, namespace, None, selector)

    def _context_namespace(self, origin: str, entry: ContextResource, target: Target, namespaced: bool) -> str:
        """Where a context entry reads: the namespace for a namespaced kind, "" for a cluster-scoped one."""
        if not namespaced:
            if self.fence.active:
                raise ReadError(
                    "OutsideTenant", f"{origin}: {entry.kind} is cluster-scoped; a TenantResource reads none"
                )
            return ""
        namespace = entry.namespace or target.namespace_name or (self.fence.home if self.fence.active else "")
        if not namespace:
            raise ReadError("InvalidItem", f"{origin}: namespace is required outside scope Namespace")
        if not self.fence.allows(namespace):
            raise ReadError(
                "OutsideTenant",
                f"{origin}: namespace {namespace} is not a namespace of this TenantResource's tenant",
            )
        return namespace

    async def _every_kind(self, origin: str, entry: ContextResource, api_version: str, target: Target) -> list[JSON]:
        """``kind: "*"``: the named (or selected) objects of every kind ``api_version`` serves, as one list.

        Cluster-scoped kinds are read only where a cluster-scoped entry could be (not by a TenantResource), and
        a kind the acting identity may not list is left out rather than failing the block: "every kind" means
        every kind this identity can see. A non-optional ``name`` found under no kind is an error."""
        found: list[JSON] = []
        selector = entry.selector if entry.selector is not None else selectors.LabelSelector()
        for kind in await self.kinds(api_version):
            namespaced = await self.namespaced(api_version, kind)
            if not namespaced and self.fence.active:
                continue
            one = entry.model_copy(update={"kind": kind})
            namespace = self._context_namespace(origin, one, target, namespaced)
            try:
                found.extend(
                    await self.read(api_version, kind, namespace, entry.name, None if entry.name else selector)
                )
            except ReadError as err:
                if err.reason != "Forbidden":
                    raise
        if entry.name and not found and not entry.optional:
            raise ReadError("SourceNotFound", f"{origin}: no kind of {api_version} has an object named {entry.name}")
        return found

    # -- placing one manifest ---------------------------------------------------------------------------

    async def place(self, origin: str, manifest: Any, target: Target, block: ResourceBlock, policy: ItemPolicy) -> None:
        if not isinstance(manifest, dict):
            self.problem(origin, "InvalidManifest", "a manifest must be an object", target)
            return
        api_version, kind = manifest.get("apiVersion"), manifest.get("kind")
        meta = manifest.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(kind, str) or not kind:
            self.problem(origin, "InvalidManifest", "the manifest has no kind", target, name=str(name or ""))
            return
        if not isinstance(api_version, str) or not api_version:
            self.problem(origin, "InvalidManifest", f"the {kind} manifest has no apiVersion", target, kind=kind)
            return
        item = {"kind": kind, "api_version": api_version}
        if not isinstance(name, str) or not name:
            self.problem(origin, "InvalidManifest", f"the {kind} manifest has no metadata.name", target, **item)
            return
        item["name"] = name
        try:
            namespaced = await self.namespaced(api_version, kind)
        except ReadError as err:
            self.problem(origin, err.reason, err.message, target, **item)
            return
        stated = meta.get("namespace") if isinstance(meta, dict) else None
        namespace = ""
        if namespaced:
            if stated is not None and not isinstance(stated, str):
                self.problem(origin, "InvalidManifest", f"{kind} {name}: metadata.namespace is not a string", target)
                return
            if target.namespace_name:
                if stated and stated != target.namespace_name:
                    self.problem(
                        origin,
                        "OutsideTenant" if self.fence.active else "NamespaceMismatch",
                        f"{kind} {name} names namespace {stated}, but its target is namespace "
                        f"{target.namespace_name}; leave metadata.namespace empty or equal to the target",
                        target,
                        **item,
                    )
                    return
                namespace = target.namespace_name
            elif stated:
                namespace = stated
            else:
                self.problem(
                    origin,
                    "InvalidManifest",
                    f"{kind} {name} is namespaced: with scope {self.scope} it must name its namespace",
                    target,
                    **item,
                )
                return
            if not self.fence.allows(namespace):
                self.problem(
                    origin,
                    "OutsideTenant",
                    f"{kind} {name}: namespace {namespace} is not a namespace of this TenantResource's tenant",
                    target,
                    **item,
                )
                return
        elif self.fence.active:
            self.problem(
                origin,
                "OutsideTenant",
                f"{kind} {name} is cluster-scoped; a TenantResource replicates only into its tenant's namespaces",
                target,
                **item,
            )
            return
        body = self._body(manifest, namespace, block)
        desired = DesiredObject(
            origin=origin,
            tenant=target.tenant_name,
            api_version=api_version,
            kind=kind,
            name=name,
            namespace=namespace,
            body=body,
            policy=policy,
            cluster_scoped=not namespaced,
        )
        existing = self.plan.objects.get(desired.key)
        if existing is not None:
            if existing.body != desired.body:
                where = f"{namespace}/{name}" if namespace else name
                self.problem(
                    origin,
                    "DuplicateItem",
                    f"{kind} {where} is also produced by {existing.origin} with different content",
                    target,
                    **item,
                )
            return
        self.plan.objects[desired.key] = desired

    def _body(self, manifest: JSON, namespace: str, block: ResourceBlock) -> JSON:
        body = {key: copy.deepcopy(value) for key, value in manifest.items() if key != "status"}
        meta = dict(body.get("metadata") or {})
        for key in _SERVER_METADATA:
            meta.pop(key, None)
        if namespace:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        extra = block.additional_metadata
        labels = {**(meta.get("labels") or {}), **((extra.labels or {}) if extra else {})}
        annotations = {**(meta.get("annotations") or {}), **((extra.annotations or {}) if extra else {})}
        for key in LIFECYCLE_ANNOTATIONS:
            annotations.pop(key, None)
        labels[ENCLAVE_MANAGED_BY] = REPLICATION_MANAGER
        annotations[REPLICATION_OWNER_ANNOTATION] = self.owner.key
        meta["labels"], meta["annotations"] = labels, annotations
        body["metadata"] = meta
        annotations[REPLICATION_HASH_ANNOTATION] = content_hash(body)
        return body


async def build(
    owner: Owner,
    spec: TenantResourceSpec,
    targets: list[list[Target]],
    reader: Reader,
    fence: Fence | None = None,
    renderer: Renderer | None = None,
) -> Plan:
    """Every desired object of ``spec`` for the per-block ``targets``, and the items that failed. Generators
    render through ``renderer`` (default :class:`InProcess`: the controller always passes its worker pool)."""
    builder = _Builder(owner, spec, reader, fence or Fence())
    render = renderer or InProcess()
    for index, block in enumerate(spec.resources):
        policy = effective_policy(block, spec)
        block_targets = targets[index] if index < len(targets) else []
        sources = await builder.sources(index, block) if block.namespaced_items and block_targets else []
        for target in block_targets:
            for position, raw in enumerate(block.raw_items or ()):
                await builder.place(f"resources[{index}].rawItems[{position}]", raw, target, block, policy)
            for origin, source in sources:
                await builder.place(origin, source, target, block, policy)
            if block.generators:
                await _generate(builder, render, index, block, target, policy)
    return builder.plan


async def _generate(
    builder: _Builder, renderer: Renderer, index: int, block: ResourceBlock, target: Target, policy: ItemPolicy
) -> None:
    try:
        context = await builder.context(index, block, target)
    except ReadError as err:
        for position, _ in enumerate(block.generators or ()):
            builder.problem(f"resources[{index}].generators[{position}]", err.reason, err.message, target)
        return
    for position, generator in enumerate(block.generators or ()):
        origin = f"resources[{index}].generators[{position}]"
        try:
            documents = await renderer.render(
                generator.template or "", context, generator.missing_key, target.tenant_name or builder.owner.key
            )
        except templates.RenderError as err:
            builder.problem(origin, err.reason, f"template in {_location(target)}: {err}", target)
            continue
        for document in documents:
            await builder.place(origin, document, target, block, policy)


def describe(key: ObjectKey) -> str:
    group, kind, namespace, name = key
    kind_text = f"{kind}.{group}" if group else kind
    return f"{kind_text} {namespace}/{name}" if namespace else f"{kind_text} {name}"
