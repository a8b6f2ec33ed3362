"""The ``enclave`` command line.

A tool, not a component: it runs nowhere in the cluster and imports the components' pure code as a library
(admission's decision functions, the tenants controller's snapshot compiler), so that what it says offline is
what the cluster decides.

Modules: :mod:`~enclave_cli.__main__` (the verbs and exit codes); offline, :mod:`~enclave_cli.documents` (YAML
that remembers file and line), :mod:`~enclave_cli.world` and :mod:`~enclave_cli.areas` (a directory compiled as
the controllers compile it), :mod:`~enclave_cli.cases` and :mod:`~enclave_cli.testing` (``enclave test``),
:mod:`~enclave_cli.engine` (one request through the webhooks in kube-apiserver's order),
:mod:`~enclave_cli.native` (the native policies enclave-tenants would write, judged as kube-apiserver judges
them) with :mod:`~enclave_cli.policy_cel` (their CEL evaluated under kube-apiserver's budgets),
:mod:`~enclave_cli.check` (``enclave check``), :mod:`~enclave_cli.explain` and :mod:`~enclave_cli.trace`
(``enclave explain``); against a cluster, :mod:`~enclave_cli.online` and :mod:`~enclave_cli.grpccheck`
(``doctor``); :mod:`~enclave_cli.completion` and :mod:`~enclave_cli.complete` (shell completion),
:mod:`~enclave_cli.output` (tables and colour).
"""
