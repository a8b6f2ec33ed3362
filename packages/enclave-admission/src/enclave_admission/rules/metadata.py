"""Metadata rules: labels and annotations of any namespaced kind (``enforce.metadata[]``).

Per key of a rule whose ``kinds``/``apiGroups`` match the object:

* ``deny``/``audit`` match a present key whose value matches one of ``values`` (any value, even empty, when
  there are none);
* ``allow`` governs the key: a present value must match one of ``values`` (when given), and a ``required``
  key must be present;
* ``managed``: the mutating hook sets the value; validation refuses any other value, and a present value equal
  to the effective managed value (the last applicable one) is exempt from value validation;
* ``default``: set by the mutating hook on creation when the key is absent; never judged or reconciled.

On UPDATE only keys whose value changed are judged, so an object that predates a rule is not locked out of
unrelated edits (the tenants controller reconciles managed values onto existing objects).
"""

from __future__ import annotations

from collections.abc import Mapping

from enclave_admission.review import JSON, pointer
from enclave_admission.rules.compiled import MAX_CACHED_VALUES, CompiledRule, KeyGroup, KeyRule, MetadataKeys
from enclave_admission.rules.engine import Finding, Item, Review, settled
from enclave_admission.rules.matching import describe, match_any


def _entries(review: Review) -> MetadataKeys:
    """Per (labels|annotations, key): the (rule, key rule) pairs that apply to this request, in rule order.
    Which rules speak about the kind is known per snapshot; only whether each applies is asked here."""
    request = review.request
    scope = review.rules.metadata_scope(request.kind, request.api_version)
    if not scope.rules:
        return {}
    applicable = tuple(position for position, (rule, _) in enumerate(scope.rules) if review.applies(rule))
    return scope.keys(applicable) if applicable else {}


def judge(review: Review) -> None:
    request = review.request
    if request.obj is None:
        return
    entries = _entries(review)
    if not entries:
        return
    update = request.operation == "UPDATE"
    for (part, key), group in entries.items():
        new: Mapping[str, str] = request.labels if part == "labels" else request.annotations
        value = new.get(key)
        if value is None and group.managed is None and not group.governed:
            continue  # deny and audit never match an absent key, and no allow requires it
        if update:
            old: Mapping[str, str] = request.old_labels if part == "labels" else request.old_annotations
            if value == old.get(key):
                continue
        managed = group.managed
        if managed is not None:
            wanted, owner = managed
            if value != wanted:
                review.settle(_managed_violation(owner, group.path, wanted, value))
            continue  # equal to the managed value: exempt from value validation
        found = group.verdicts.get(value)
        if found is None:
            found = _verdicts(group, value)
        review.findings.extend(found)


def _verdicts(group: KeyGroup, value: str | None) -> tuple[Finding, ...]:
    """What the rules of ``group`` find about ``value``, remembered for the next request with that value."""
    item = Item()
    for rule, rule_key in group.pairs:
        _judge_key(item, rule, rule_key, group.path, value)
    found = tuple(settled(item))
    if len(group.verdicts) >= MAX_CACHED_VALUES:
        group.verdicts.clear()
    group.verdicts[value] = found
    return found


def _managed_violation(rule: CompiledRule, path: str, wanted: str, value: str | None) -> Item:
    item = Item()
    shown = "absent" if value is None else repr(value)
    why = f"{path} is managed by {rule.origin}: it must be {wanted!r}, not {shown}"
    if rule.action == "audit":
        item.audit(rule, why)
    else:
        item.deny(rule, why)
    return item


def _judge_key(item: Item, rule: CompiledRule, key: KeyRule, path: str, value: str | None) -> None:
    if rule.action == "allow":
        if value is None:
            if key.required:
                item.allow(rule, False, f"{rule.origin} requires {path}")
            else:
                item.allow(rule, True, "")
        elif key.values and not match_any(key.values, value):
            item.allow(rule, False, f"{rule.origin} allows {path} only {describe(key.values)}; got {value!r}")
        else:
            item.allow(rule, True, "")
        return
    if value is None:
        return
    if not key.values or match_any(key.values, value):
        matched = f" (matches {describe(key.values)})" if key.values else ""
        verb = "denies" if rule.action == "deny" else "audits"
        item.hit(rule, f"{rule.origin} {verb} {path}={value!r}{matched}")


def managed_and_defaults(review: Review, wanted: dict[tuple[str, str], str]) -> None:
    """Add to ``wanted`` (values earlier mutations set) the managed values (CREATE and UPDATE) and the defaults
    of absent keys (CREATE); a managed value always has the last word."""
    request = review.request
    for (part, key), group in _entries(review).items():
        managed = group.managed
        current = wanted.get((part, key), (request.labels if part == "labels" else request.annotations).get(key))
        if managed is not None:
            if current != managed[0]:
                wanted[(part, key)] = managed[0]
            continue
        if request.operation == "CREATE" and current is None:
            defaults = [rule_key.default for _, rule_key in group.pairs if rule_key.default is not None]
            if defaults:
                wanted[(part, key)] = defaults[-1]


def set_metadata(obj: JSON, wanted: Mapping[tuple[str, str], str]) -> list[JSON]:
    """Minimal JSON patch setting ``(labels|annotations, key) -> value`` on ``obj``."""
    operations: list[JSON] = []
    meta = obj.get("metadata") or {}
    created: dict[str, JSON] = {}
    for (part, key), value in wanted.items():
        existing = meta.get(part)
        if not isinstance(existing, dict):
            created.setdefault(part, {})[key] = value
        else:
            operations.append({"op": "add", "path": pointer("metadata", part, key), "value": value})
    for part, values in created.items():
        operations.insert(0, {"op": "add", "path": pointer("metadata", part), "value": values})
    return operations
