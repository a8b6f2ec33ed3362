"""Namespaces: assignment to tenants (mutation) and the tenant fence around them (validation)."""
