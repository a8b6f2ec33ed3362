"""Custom quotas: the generic validating hook (``/quotas``) and CustomQuota/GlobalCustomQuota validation."""
