"""Tenant rules on namespaced objects (``/resources`` and ``/resources/mutate``), decided from the Rules snapshot.

``compiled`` turns a namespace's rules into matchers and CEL programs once per snapshot, with the value
matchers and address ranges of ``matching``; ``engine`` decides which rules apply to a request and how their
verdicts combine; one module per rule area judges its items (``metadata``, ``services``, ``ingress``,
``network``, ``storage``, and the ``workloads`` package for Pods and their controllers); ``validation`` and
``mutation`` are the two webhooks; ``exempt`` says whose requests are never judged and why.
"""
