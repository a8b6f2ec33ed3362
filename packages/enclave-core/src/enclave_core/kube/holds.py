"""Does the live object hold what we want: the one comparison every controller's "skip the write" uses.

A controller that writes an object on every pass wastes the apiserver and wakes every watcher, so each one
compares what it would write (``desired``) with what it read (``live``) first. What it read is not what it
wrote: kube-apiserver adds defaults, drops empty fields, stores quantities in canonical form, and other
managers add their own fields. :func:`holds` says whether ``live`` already carries everything ``desired``
states, by these rules:

1. **Maps**: every key ``desired`` sets must be held by the same key of ``live``; keys only ``live`` has are
   not a difference (server defaults, ``resourceVersion``, other managers' labels).
2. **Nothing**: null, an empty map and an empty list in ``desired`` are held by a missing key, a null, an
   empty map or an empty list: null is how a field is removed, and kube-apiserver stores no empty optional
   field of a built-in kind (``annotations: {}`` comes back absent). An empty map is also held by any map
   (rule 1); an empty list is not held by a list with items, nor null by a value.
3. An **empty string is a value**: labels and ConfigMap data keep ``""``, so a missing key does not hold it.
4. **Lists**: the same length, item by item in order (an item someone added is drift; the lists Enclave
   writes are atomic or keyed in the order written).
5. **Scalars**: booleans by identity (``True`` does not hold ``1``), numbers by value (``1`` holds ``1.0``),
   strings by text, except below.
6. **Quantities**: the values of a map named in :data:`QUANTITY_MAPS` (``hard``, ``requests``, ``limits``,
   ...) compare as Kubernetes quantities when both parse (``"1"`` holds ``"1000m"``, ``"1Gi"`` holds
   ``"1024Mi"``, ``1`` holds ``"1"``): the apiserver stores them canonical. Anywhere else ``"1"`` and
   ``"1000m"`` are two strings (a ConfigMap's data means what it says).
7. At the top, ``apiVersion`` and ``kind`` missing from ``live`` are no difference: list responses leave
   them out of their items. Present, they must match.

:func:`same` is equality under the same rules (each holds the other): for fields a controller owns whole,
where a key someone added is drift too (a ResourceQuota's ``hard``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from enclave_core.quantity import Quantity

__all__ = ["QUANTITY_MAPS", "holds", "quantity_equal", "same"]

QUANTITY_MAPS: Final = frozenset(
    {
        "hard",
        "used",
        "requests",
        "limits",
        "capacity",
        "allocatable",
        "overhead",
        "max",
        "min",
        "default",
        "defaultRequest",
        "maxLimitRequestRatio",
    }
)
"""Names of the maps whose values are ``resource.Quantity`` in the Kubernetes API (ResourceQuota and
Enclave's quotas, container resources, PVC requests, node capacity, LimitRange limits)."""

_TOP_OPTIONAL: Final = ("apiVersion", "kind")
_MISSING: Final = object()


def holds(live: object, desired: object, *, quantities: bool = False) -> bool:
    """Whether ``live`` carries everything ``desired`` states (the module docstring's rules).

    ``quantities``: ``desired`` is itself a map of quantities (a ``hard`` or ``requests`` map compared on its own).
    """
    if isinstance(desired, Mapping) and isinstance(live, Mapping):
        return all(
            (key in _TOP_OPTIONAL and key not in live) or _holds(live.get(key, _MISSING), value, key, quantities)
            for key, value in desired.items()
        )
    return _holds(live, desired, "", False)


def same(a: object, b: object, *, quantities: bool = False) -> bool:
    """Equality under :func:`holds`'s rules: ``a`` holds ``b`` and ``b`` holds ``a``."""
    return holds(a, b, quantities=quantities) and holds(b, a, quantities=quantities)


def quantity_equal(live: object, desired: object) -> bool:
    """Two quantity values (strings or integers) of the same amount; text equality when either does not parse."""
    if type(live) is type(desired) and live == desired:
        return True
    if isinstance(live, bool) or isinstance(desired, bool):
        return False
    if not isinstance(live, str | int) or not isinstance(desired, str | int):
        return False
    try:
        return Quantity.parse(live) == Quantity.parse(desired)
    except ValueError:
        return False


def _nothing(value: object) -> bool:
    """Missing, null, ``{}`` or ``[]``: what kube-apiserver does not store for a built-in kind."""
    return value is _MISSING or value is None or (isinstance(value, Mapping | list) and not value)


def _holds(live: object, desired: object, key: str, in_quantity_map: bool) -> bool:
    """``desired`` is the value of ``key`` (``""`` in a list or at the top) of a map, ``in_quantity_map`` when
    that map is one of :data:`QUANTITY_MAPS`."""
    if _nothing(desired):
        return _nothing(live) or (isinstance(desired, Mapping) and isinstance(live, Mapping))
    if isinstance(desired, Mapping):
        if not isinstance(live, Mapping):
            return False
        values_are_quantities = key in QUANTITY_MAPS
        return all(
            _holds(live.get(child, _MISSING), value, child, values_are_quantities) for child, value in desired.items()
        )
    if isinstance(desired, list):
        if not isinstance(live, list) or len(live) != len(desired):
            return False
        return all(_holds(a, b, "", False) for a, b in zip(live, desired, strict=True))
    if live is _MISSING:
        return False
    if in_quantity_map:
        return quantity_equal(live, desired)
    if isinstance(desired, bool) or isinstance(live, bool):
        return live is desired
    return bool(live == desired)
