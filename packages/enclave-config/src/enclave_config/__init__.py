"""enclave-config: owns the global ServiceConfiguration and everything cluster-wide that follows from it.

It turns the ``default`` ServiceConfiguration into webhook configurations, the webhook TLS Secret, the
namespace provisioner/deleter roles and their binding, writes the object's status, and streams the effective
configuration to the other components over ``ConfigService``.
"""
