"""Talking to kube-apiserver: raw-JSON REST calls, informers (list + watch into memory), events."""
