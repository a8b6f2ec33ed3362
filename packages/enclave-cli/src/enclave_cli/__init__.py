"""The ``enclave`` command line.

A tool, not a component: it runs nowhere in the cluster and imports the components' pure code as a library
(admission's decision functions, the tenants controller's snapshot compiler), so that what it says offline is
what the cluster decides.
"""
