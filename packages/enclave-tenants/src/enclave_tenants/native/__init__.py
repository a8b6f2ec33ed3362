"""Tenant rules that kube-apiserver enforces itself: ValidatingAdmissionPolicies compiled from RuleStatus.

:mod:`~enclave_tenants.native.compiler` is pure (a namespace's compiled rules in, policy bodies and the path each
rule takes out); :mod:`~enclave_tenants.native.controller` keeps the policies and their bindings in step on the
Lease holder. docs/rules.md ("Native policies") says what compiles and what stays on the webhook.
"""
