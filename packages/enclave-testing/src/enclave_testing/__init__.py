"""Enclave test support: pinned control-plane binaries, a real local control plane, and the pytest fixtures."""
