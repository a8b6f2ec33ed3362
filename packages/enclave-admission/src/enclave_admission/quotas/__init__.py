"""Custom quotas: the generic validating hook (``/quotas``) and CustomQuota/GlobalCustomQuota validation
(:mod:`.validation`), deciding from the QuotaTargets snapshot indexed by what each quota counts (:mod:`.index`)."""
