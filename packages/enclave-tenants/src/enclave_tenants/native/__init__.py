"""Tenant rules that kube-apiserver enforces itself: ValidatingAdmissionPolicies compiled from RuleStatus.

:mod:`~enclave_tenants.native.compiler` is pure (a namespace's compiled rules in, policy bodies and the path each
rule takes out), writing its CEL through :mod:`~enclave_tenants.native.celtext`;
:mod:`~enclave_tenants.native.objects` turns a program into the policy and binding objects of a tenant;
:mod:`~enclave_tenants.native.controller` keeps them in step on the Lease holder. docs/rules.md ("Native
policies") says what compiles and what stays on the webhook.
"""
