"""Tenant rules that kube-apiserver enforces itself: ValidatingAdmissionPolicies compiled from RuleStatus.

:mod:`~enclave_tenants.native.compiler` is pure (a namespace's compiled rules in, policy bodies and the path each
rule takes out), writing its CEL through :mod:`~enclave_tenants.native.celtext`, with the services, workloads,
ingress and network areas in modules of their own (:mod:`~enclave_tenants.native.services`,
:mod:`~enclave_tenants.native.workloads`, :mod:`~enclave_tenants.native.ingress`,
:mod:`~enclave_tenants.native.network`, each an :class:`~enclave_tenants.native.area.Area`; :mod:`~enclave_tenants.native.workload_limits` bounds the
workloads' cost), metadata mutations in :mod:`~enclave_tenants.native.mutations`, the CEL each Kubernetes minor
offers in :mod:`~enclave_tenants.native.minors`, and patterns checked by :mod:`~enclave_tenants.native.dialect`;
:mod:`~enclave_tenants.native.objects` turns a program into the policy and binding objects of a tenant;
:mod:`~enclave_tenants.native.controller` keeps them in step on the Lease holder. docs/rules.md ("Native
policies") says what compiles and what stays on the webhook.
"""
