"""The offline policy cases of ``enclave test``, through the real admission server on the real control plane.

The stack (``conftest.cluster``) holds the directory's objects. Each case is sent, hook by hook in
kube-apiserver's order, as an AdmissionReview (dry run, so nothing is reserved) over HTTPS with kube-apiserver's
webhook client certificate; the answers must be the ones ``enclave test`` computes offline: the same result,
message, patch (tenant uids aside, which offline runs cannot know) and warnings, and every hook's reason (read
from admission's decision log by the review's uid, since the HTTP answer does not carry it).
"""

from __future__ import annotations

import pytest

from enclave_cli import testing
from enclave_cli.cases import Case
from enclave_cli.engine import evaluate
from enclave_cli.world import compile_world
from enclave_testing.stack import TenancyStack

from .conftest import CASES, WORLD, Remote, answer


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_cluster_answers_as_offline(cluster: tuple[TenancyStack, Remote], case: Case) -> None:
    _, remote = cluster
    compiled = compile_world(WORLD)
    offline = testing.run_case(case, compiled)
    assert offline.passed, offline.problems
    assert offline.outcome is not None
    online = evaluate(case.request, compiled.state(), compiled.namespace, remote)
    assert answer(online) == answer(offline.outcome)
