"""enclave-proxy: an HTTPS front for kube-apiserver that lets tenant users see their own part of the cluster.

Layout (pure modules decide, the others do I/O):

- ``identity``: who the caller is (bearer token through TokenReview with a short cache, or a client
  certificate) and the impersonation headers that carry that identity upstream. I/O: TokenReview.
- ``query``: label and field selectors of a list or watch query, parsed and matched. Pure.
- ``visibility``: which namespaces a caller may list, from the Tenancy and configuration snapshots. Pure.
- ``tables``: the ``meta.k8s.io`` Table kubectl asks for, for namespaces. Pure.
- ``namespaces``: list and watch of namespaces for tenant users, answered from an informer. I/O: the
  informer and the client's stream.
- ``forward``: everything else, passed through with the caller's identity (streams, WebSocket upgrades).
- ``server``: the HTTPS listener and the route from a request to one of the above.
"""
