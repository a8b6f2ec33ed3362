"""Replication admission: protection of replicated objects (validation) and the conversion of the deprecated
``settings``/``pruningOnDelete`` into per-block policies (mutation)."""
