"""Enclave's shared library.

Everything more than one component needs lives here: the API models of group ``enclave.dev``,
label-selector and quantity arithmetic, the CEL facade, the gRPC contracts and the process runtime
(health, metrics, logging, leader election). No component logic: components never import each other.
"""

API_GROUP = "enclave.dev"
API_VERSION = "v1beta2"
GROUP_VERSION = f"{API_GROUP}/{API_VERSION}"

__all__ = ["API_GROUP", "API_VERSION", "GROUP_VERSION"]
