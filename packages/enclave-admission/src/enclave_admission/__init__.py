"""Enclave admission: the stateless HTTPS webhook server."""
