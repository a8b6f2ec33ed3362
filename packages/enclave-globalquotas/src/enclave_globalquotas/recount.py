"""When a ResourceQuota may report less than what exists, count the namespace's objects instead.

A namespace's usage comes from the status of the ResourceQuota Enclave keeps there: kube-apiserver's quota
plugin raises ``status.used`` on every admitted object, and kube-controller-manager's resourcequota controller
recounts the namespace from its informers (on a ``spec.hard`` change, after a deletion, at its periodic
resync). A recount that runs while an object is charged but not yet stored, or before the controller's own
informers have seen it, misses that object and overwrites the charge (kubernetes/kubernetes#113716 describes
the family): the ResourceQuota then under-reports until its next recount, and a ledger built on that figure
would give the missing units out a second time. The ResourceQuota itself would admit them too, since its
``hard`` is computed from the same figure.

Such an under-report always shows as a *decrease*: a recount that misses an object writes a lower ``used``
than the charge before it, or than the usage the controller accepted once the object's reservation settled.
So this module trusts a ResourceQuota's report while it only grows, and on a decrease (a deletion, or a
recount that missed something) asks for the namespace's objects to be counted (a LIST of each evaluated
kind, :func:`count`), the count being a lower bound of what exists. The usage the controller then uses is,
per resource, the larger of the report and the count (:meth:`Recounts.effective`). The namespace stays
*suspect*, and is counted again whenever its ResourceQuota or its settled reservations move and once more
after :data:`WINDOW` (an object charged before the recount is stored within it), until the report has caught
up with the count and no reservation of the namespace is pending. A namespace newly selected is counted once
when its ResourceQuota first reports (a recount for a new ResourceQuota can miss an object in flight the same
way). A report can also be short without ever going down where the controller saw it (a recount that missed a
stored object, then charges that raised the figure again before the next event arrived), so a namespace is
counted too whenever a reservation of it settles (:meth:`Recounts.settling`): the reservation is dropped only
into a count taken after its object was seen to exist. In a steady state nothing is counted: the reads happen on
a decrease and when creates settle, one LIST per evaluated kind per namespace and pass.

Only what :mod:`enclave_core.resourceusage` evaluates is counted (the resources admission reserves for), Secrets
aside (:data:`KINDS`); any other resource keeps the ResourceQuota's report.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from enclave_core.quantity import Quantity
from enclave_core.resourceusage import scoped, usage
from enclave_core.snapshots.globalquotas import GlobalQuotaView

JSON = dict[str, Any]
Pair = tuple[str, str]
"""(quota, namespace)."""

WINDOW: Final = 5.0
"""Seconds after a decrease within which an object charged before the recount is stored (as
:data:`enclave_globalquotas.ledger.IN_FLIGHT`): the count that clears a suspicion is taken after it."""

KINDS: Final = ("pods", "services", "configmaps", "persistentvolumeclaims", "replicationcontrollers")
"""The core kinds :mod:`enclave_core.resourceusage` evaluates and the controller may list. ``resourcequotas``
aside (Enclave's own ResourceQuotas are in every selected namespace and change only by the controllers that own
them), and ``secrets``: an account that may list Secrets reads the CA key and every component's client
certificate in Enclave's namespace, so Secrets keep the ResourceQuota's report."""

_POD_NAMES = ("cpu", "memory", "ephemeral-storage")
_STORAGE_CLASS = ".storageclass.storage.k8s.io/"


def kind_of(resource: str) -> str | None:
    """The core kind whose objects make up ``resource`` (a ResourceQuota resource name), or None."""
    name = resource.removeprefix("count/")
    if name in KINDS:
        return name
    if name == "secrets":
        return None
    if resource.startswith("services."):
        return "services"
    if resource in _POD_NAMES or resource.startswith(("requests.", "limits.", "hugepages-")):
        return "persistentvolumeclaims" if resource == "requests.storage" else "pods"
    if _STORAGE_CLASS in resource:
        return "persistentvolumeclaims"
    return None


def kinds_for(resources: Iterable[str]) -> dict[str, list[str]]:
    """Kind -> the resources of ``resources`` it makes up (kinds that make up none are left out)."""
    kinds: dict[str, list[str]] = {}
    for resource in resources:
        kind = kind_of(resource)
        if kind is not None:
            kinds.setdefault(kind, []).append(resource)
    return kinds


def count(quota: GlobalQuotaView, kind: str, objects: Iterable[Mapping[str, Any]]) -> dict[str, Quantity]:
    """What ``objects`` (all of ``kind`` in one namespace) count for toward ``quota``, for the resources of
    ``quota.hard`` that ``kind`` makes up (each at 0 when nothing counts)."""
    names = kinds_for(quota.hard).get(kind, [])
    total = {name: Quantity(0) for name in names}
    for obj in objects:
        if not scoped(quota, "", kind, obj):
            continue
        for name, value in usage("", kind, obj, names).items():
            total[name] = total[name] + value
    return total


@dataclass
class _Namespace:
    floor: dict[str, Quantity]
    """The usage last accepted for the namespace (the effective one)."""
    last_report: dict[str, Quantity] = field(default_factory=dict)
    suspect_since: float | None = None
    counted: dict[str, Quantity] | None = None
    counted_at: float = 0.0
    counted_key: tuple[str, int] = ("", 0)
    count_now: bool = False
    """A reservation settles into this pass's usage: count before accepting any figure (:meth:`Recounts.settling`)."""


@dataclass
class Recounts:
    """Per (quota, namespace): the usage last accepted, and whether the namespace is suspect. Time is the
    caller's monotonic clock; ``key`` is (the ResourceQuota's resourceVersion, the namespace's settled
    reservations so far): a count is reused while it holds."""

    window: float = WINDOW
    _state: dict[Pair, _Namespace] = field(default_factory=dict)

    def wants_count(
        self,
        pair: Pair,
        reported: Mapping[str, Quantity],
        key: tuple[str, int],
        now: float,
        *,
        seed: Mapping[str, Quantity] | None = None,
    ) -> bool:
        """Whether to count ``pair``'s namespace before accepting ``reported``. ``seed`` is the usage accepted
        before this process started (the quota's ``status.namespaceUsage``); without one the namespace is new
        to the quota and counted once."""
        state = self._state.get(pair)
        if state is None:
            state = self._state[pair] = _Namespace(floor=dict(seed) if seed is not None else {})
            if seed is None:
                state.suspect_since = now - self.window  # new: one count, no window to wait out
        # Below what was accepted (while trusted), or below its own last figure (while suspect: the floor is
        # then the count, which a short report stays below without going down again).
        below = state.floor if state.suspect_since is None else state.last_report
        if any(value < below[name] for name, value in reported.items() if name in below):
            state.suspect_since = now
        state.last_report = dict(reported)
        if state.suspect_since is None:
            return False
        if state.count_now:
            return True
        if state.counted is None or state.counted_key != key:
            return True
        return state.counted_at < state.suspect_since + self.window <= now

    def settling(self, pair: Pair, now: float) -> None:
        """A reservation of ``pair`` settles: its object exists, and the report may not hold it even though it
        never went down where this controller could see it (kube-controller-manager recounted before its
        informer had the object, and later charges raised the figure again). So the namespace is counted this
        pass, and stays suspect until the report holds the count (no window: the object is stored already)."""
        state = self._state.setdefault(pair, _Namespace(floor={}))
        if state.suspect_since is None:
            state.suspect_since = now - self.window
        state.count_now = True

    def counted(self, pair: Pair, amounts: Mapping[str, Quantity], key: tuple[str, int], now: float) -> None:
        state = self._state.setdefault(pair, _Namespace(floor={}))
        state.counted, state.counted_at, state.counted_key = dict(amounts), now, key
        state.count_now = False

    def failed(self, pair: Pair, key: tuple[str, int]) -> None:
        """A count could not be taken: hold the namespace at the usage last accepted (never below it on the
        report's word alone) and count again on the next pass."""
        state = self._state.setdefault(pair, _Namespace(floor={}))
        if state.counted is None:
            state.counted = dict(state.floor)
        state.counted_key = ("", -1) if key != ("", -1) else ("", -2)

    def effective(
        self, pair: Pair, reported: Mapping[str, Quantity], *, pending: bool, now: float
    ) -> dict[str, Quantity]:
        """The usage to use for ``pair``: the larger of report and count while suspect. Clears the suspicion
        once a count taken after the window is matched by the report and nothing is pending; the result is the
        new floor."""
        state = self._state.setdefault(pair, _Namespace(floor={}))
        result = dict(reported)
        counted = state.counted if state.suspect_since is not None else None
        if counted is not None:
            for name, value in counted.items():
                if name in result and value > result[name]:
                    result[name] = value
            assert state.suspect_since is not None
            settled = state.counted_at >= state.suspect_since + self.window
            if settled and not pending and all(reported.get(n, v) >= v for n, v in counted.items()):
                state.suspect_since, state.counted = None, None
        state.floor = dict(result)
        return result

    def overrides(self) -> dict[str, dict[str, dict[str, Quantity]]]:
        """Quota -> namespace -> the count of each suspect namespace (what the plan raises the report to)."""
        found: dict[str, dict[str, dict[str, Quantity]]] = {}
        for (quota, namespace), state in self._state.items():
            if state.suspect_since is not None and state.counted is not None:
                found.setdefault(quota, {})[namespace] = dict(state.counted)
        return found

    def recheck_at(self) -> float | None:
        """When a suspect namespace's window ends and it should be counted again (None: nothing waits)."""
        times = [
            s.suspect_since + self.window
            for s in self._state.values()
            if s.suspect_since is not None and s.counted_at < s.suspect_since + self.window
        ]
        return min(times) if times else None

    def forget(self, keep: Iterable[Pair]) -> None:
        """Drop the state of pairs no quota selects any more (a namespace that comes back is new again)."""
        wanted = set(keep)
        for pair in list(self._state):
            if pair not in wanted:
                del self._state[pair]
