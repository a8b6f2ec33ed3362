"""The render worker pool against its worst cases: a template that loops, one that allocates, one that outlives
its wall time. Each fails only itself with a budget reason, the event loop keeps turning meanwhile, and the
pool replaces the worker it killed (real worker processes, no cluster)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable

import pytest

from enclave_replication import sandbox, templates

LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
ALLOCATES = "{{ 'x' * 10**10 }}"
MANIFEST = "kind: ConfigMap\nmetadata:\n  name: {{ tenant.metadata.name }}-cm\ndata:\n  n: '{{ 6 * 7 }}'\n"
CONTEXT = {"tenant": {"metadata": {"name": "acme"}}}


@pytest.fixture
async def pool() -> AsyncIterator[sandbox.RenderPool]:
    running = sandbox.RenderPool(sandbox.Budget(cpu_seconds=1, wall_seconds=20, memory_bytes=128 << 20, workers=2))
    try:
        yield running
    finally:
        await running.close()


async def failure(call: Awaitable[object]) -> templates.RenderError:
    with pytest.raises(templates.RenderError) as caught:
        await call
    return caught.value


async def workers(pool: sandbox.RenderPool) -> set[int]:
    """The pool's worker processes once all of them run (they start in the background, slowly on a loaded host)."""
    for _ in range(1200):  # a minute
        if len(pool.pids) == pool.budget.workers:
            return set(pool.pids)
        await asyncio.sleep(0.05)
    raise AssertionError(f"the pool runs {pool.pids}, not {pool.budget.workers} workers")


async def largest_pause(during: Awaitable[object]) -> float:
    """The longest the event loop went without running a 10 ms ticker while ``during`` was awaited."""
    gaps: list[float] = []

    async def tick() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    try:
        await during
    finally:
        ticker.cancel()
    return max(gaps, default=0.0)


async def test_a_template_renders_to_manifests_in_a_worker(pool: sandbox.RenderPool) -> None:
    documents = await pool.render(MANIFEST, CONTEXT)
    assert documents == [{"kind": "ConfigMap", "metadata": {"name": "acme-cm"}, "data": {"n": "42"}}]
    assert len(pool.pids) == 2


async def test_a_template_error_is_reported_and_the_worker_kept(pool: sandbox.RenderPool) -> None:
    await pool.render(MANIFEST, CONTEXT)
    before = pool.pids
    error = await failure(pool.render("{{ missing.key }}", {}, "error"))
    assert error.reason == "RenderFailed"
    assert "missing" in str(error)
    assert pool.pids == before


async def test_nested_loops_are_stopped_by_the_cpu_budget_and_the_worker_replaced(pool: sandbox.RenderPool) -> None:
    await pool.render(MANIFEST, CONTEXT)
    before = await workers(pool)
    started = time.monotonic()
    caught: list[templates.RenderError] = []

    async def attack() -> None:
        caught.append(await failure(pool.render(LOOPS, CONTEXT, party="tenant-a")))

    pause = await largest_pause(attack())
    took = time.monotonic() - started
    assert caught[0].reason == sandbox.CPU_REASON, caught[0]
    # Not a timing target (those are benchmarks): a render on the loop would stall it for the whole render, so
    # the loop's longest pause is compared with the render's own time, which a loaded host stretches alike.
    assert pause < took / 2, f"the event loop stalled {pause:.2f} s of a {took:.2f} s render"
    assert pool.replaced == 1
    documents = await pool.render(MANIFEST, CONTEXT)  # the pool recovered
    assert documents[0]["metadata"]["name"] == "acme-cm"
    # The replacement starts beside the survivor, which may well have served that render: wait for it.
    assert len(await workers(pool) - before) == 1


async def test_a_huge_string_is_stopped_by_the_memory_budget(pool: sandbox.RenderPool) -> None:
    error = await failure(pool.render(ALLOCATES, CONTEXT))
    assert error.reason == "RenderMemoryBudgetExceeded", error
    assert (await pool.render(MANIFEST, CONTEXT))[0]["data"] == {"n": "42"}


async def test_a_render_past_its_wall_time_is_killed() -> None:
    running = sandbox.RenderPool(sandbox.Budget(cpu_seconds=30, wall_seconds=1, workers=1))
    try:
        error = await failure(running.render(LOOPS, CONTEXT))
        assert error.reason == sandbox.TIME_REASON
        assert (await running.render(MANIFEST, CONTEXT))[0]["metadata"] == {"name": "acme-cm"}
    finally:
        await running.close()


async def test_a_budget_failure_is_remembered_not_paid_again(pool: sandbox.RenderPool) -> None:
    await failure(pool.render(LOOPS, {"n": 1}))
    started = time.monotonic()
    again = await failure(pool.render(LOOPS, {"n": 1}))
    assert again.reason == sandbox.CPU_REASON
    assert time.monotonic() - started < 0.5
    assert pool.replaced == 1


async def test_one_tenants_heavy_templates_leave_the_other_worker_to_others(pool: sandbox.RenderPool) -> None:
    await pool.render(MANIFEST, CONTEXT)
    heavy = [asyncio.create_task(failure(pool.render(LOOPS, {"i": i}, party="tenant-a"))) for i in range(3)]
    await asyncio.sleep(0.1)
    started = time.monotonic()
    documents = await pool.render(MANIFEST, CONTEXT, party="tenant-b")
    assert time.monotonic() - started < 3.0, "tenant b waited on tenant a's templates"
    assert documents[0]["metadata"]["name"] == "acme-cm"
    reasons = {error.reason for error in await asyncio.gather(*heavy)}
    assert reasons == {sandbox.CPU_REASON}


async def test_yaml_aliases_cannot_multiply_past_the_budget(pool: sandbox.RenderPool) -> None:
    lines = ["a: &a ['xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx', 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx']"]
    lines += [f"{chr(98 + n)}: &{chr(98 + n)} [*{chr(97 + n)}, *{chr(97 + n)}, *{chr(97 + n)}]" for n in range(20)]
    error = await failure(pool.render("\n".join(lines), {}))
    assert error.reason in {"RenderFailed", "RenderMemoryBudgetExceeded", sandbox.CPU_REASON}, error
    assert (await pool.render(MANIFEST, CONTEXT))[0]["kind"] == "ConfigMap"
