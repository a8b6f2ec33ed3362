"""enclave-quotas: CustomQuota and GlobalCustomQuota, their QuantityLedgers, and the QuotaTargets snapshot."""
