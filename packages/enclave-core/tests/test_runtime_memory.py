"""Returning freed heap pages to the system after a burst of work."""

from __future__ import annotations

from enclave_core.runtime import memory


def test_release_returns_pages_a_freed_burst_held() -> None:
    # Many mid-sized blocks (glibc heap, not mmap), all freed but the last: without a trim glibc keeps them.
    blocks = [bytearray(8192) for _ in range(20_000)]
    keep = blocks[-1]
    before = memory.resident_bytes()
    del blocks
    assert before > 0
    released = memory.release()
    assert released >= 0
    assert memory.resident_bytes() <= before
    assert keep  # the last block stays in use across the trim


def test_releaser_releases_only_after_work_and_at_most_every_interval() -> None:
    now = [100.0]
    releaser = memory.Releaser(interval=10.0, clock=lambda: now[0])
    assert not releaser.idle()  # nothing done yet
    releaser.worked()
    assert releaser.idle()
    releaser.worked()
    now[0] += 5
    assert not releaser.idle()  # too soon
    now[0] += 5
    assert releaser.idle()
    assert not releaser.idle()  # no work since
