"""enclave-globalquotas: one native ResourceQuota shared by many namespaces (GlobalResourceQuota).

For each GlobalResourceQuota it keeps a ResourceQuota in every selected namespace whose ``hard`` is that
namespace's usage plus the global headroom, so kube-apiserver's own quota admission refuses at the shared
limit; a QuantityLedger per quota through which admission reserves concurrent creates across namespaces; and
the GlobalResourceQuotas that tenant rule ``quota`` entries ask for. See docs/architecture.md.
"""
