"""Tenants: deletion protection."""
