"""Replication admission: protection of replicated objects (:mod:`.validation`), the conversion of the deprecated
``settings``/``pruningOnDelete`` into per-block policies (:mod:`.mutation`), and GlobalTenantResource and
TenantResource specs that cannot work (:mod:`.spec`)."""
