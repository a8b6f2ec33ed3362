"""Talking to kube-apiserver: raw-JSON REST calls, informers (list + watch into memory), events, and
:mod:`~enclave_core.kube.holds` (whether a live object already holds what a controller would write)."""
