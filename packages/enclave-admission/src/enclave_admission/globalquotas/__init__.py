"""GlobalResourceQuota admission: reservations across namespaces and validation of the quotas themselves."""
