"""The keeper of the shared component stack: one stack at a time, reused only for the same key."""

from __future__ import annotations

from pathlib import Path

from enclave_testing.shared import StackKeeper, share_fixture, uses_shared_stack


class Fake:
    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False
        self.whole = True


def keep(keeper: StackKeeper, key: str, made: list[Fake]) -> Fake:
    def start() -> Fake:
        made.append(Fake(key))
        return made[-1]

    return keeper.acquire(key, start, lambda fake: setattr(fake, "closed", True), lambda fake: fake.whole)


def test_the_same_key_reuses_and_another_closes_the_first() -> None:
    keeper, made = StackKeeper(), list[Fake]()
    first = keep(keeper, "fence", made)
    assert keep(keeper, "fence", made) is first
    other = keep(keeper, "pools", made)
    assert first.closed
    assert not other.closed
    assert (keeper.started, keeper.reused) == (2, 1)
    keeper.release()
    assert other.closed


def test_a_stack_left_unwhole_is_closed_and_started_again() -> None:
    keeper, made = StackKeeper(), list[Fake]()
    first = keep(keeper, "fence", made)
    keeper.check()
    assert not first.closed
    first.whole = False
    keeper.check()
    assert first.closed
    assert keep(keeper, "fence", made) is not first


def test_a_health_probe_that_raises_counts_as_unwhole() -> None:
    keeper = StackKeeper()
    closed: list[bool] = []

    def broken(_: object) -> bool:
        raise ConnectionError("probe refused")

    keeper.acquire("fence", object, lambda _: closed.append(True), broken)
    keeper.check()
    assert closed == [True]


def test_only_registered_fixtures_of_their_suite_keep_the_stack(tmp_path: Path) -> None:
    suite, other = tmp_path / "security", tmp_path / "replication"
    share_fixture("shared_for_test", suite)
    assert uses_shared_stack(["kube", "shared_for_test"], suite / "test_a.py")
    assert not uses_shared_stack(["kube", "namespace"], suite / "test_a.py")
    # another suite's fixture of the same name starts a stack of its own
    assert not uses_shared_stack(["kube", "shared_for_test"], other / "test_b.py")
