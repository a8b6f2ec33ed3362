"""The null/empty rows of docs/api.md's "Null and empty selectors" table for the fields holding a list of
selectors: GlobalResourceQuota.namespaceSelectors and ResourcePool.selectors go through ``matches_any`` (absent
or ``[]``: nothing; ``[{}]``: everything); CustomQuota scopeSelectors through ``scope_matches`` (absent or ``[]``:
every object, as a ResourceQuota without scopeSelector)."""

from __future__ import annotations

from enclave_core.api.meta import LabelSelector
from enclave_core.quotas.evaluate import scope_matches
from enclave_core.selectors import matches_any

LABELS = {"team": "a"}


def test_namespace_selector_lists_null_and_empty_match_nothing_and_an_empty_entry_everything() -> None:
    assert not matches_any(None, LABELS)
    assert not matches_any([], LABELS)
    assert matches_any([LabelSelector()], LABELS)
    assert matches_any([LabelSelector()], {})


def test_scope_selectors_null_and_empty_govern_every_object() -> None:
    assert scope_matches(None, LABELS)
    assert scope_matches([], LABELS)
    assert scope_matches([LabelSelector()], LABELS)
    assert not scope_matches([LabelSelector.model_validate({"matchLabels": {"team": "b"}})], LABELS)
