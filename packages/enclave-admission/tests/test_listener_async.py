"""Awaited answers (quota decisions that write a ledger) keep HTTP/1.1's order and the graceful stop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import orjson
from test_listener import connect, post, read_answer

from enclave_admission.connection import Connection
from enclave_admission.listener import Answer, Listener
from enclave_testing.waiting import assert_cancel_is_kept


def mixed(method: str, path: str, body: bytes, trusted: bool = True) -> Answer | Awaitable[Answer]:
    """``/slow/<ms>`` answers after a delay, ``/fail`` raises while awaited, anything else at once."""
    if path.startswith("/slow/"):

        async def later() -> Answer:
            await asyncio.sleep(int(path.rsplit("/", 1)[1]) / 1000)
            return 200, orjson.dumps({"path": path})

        return later()
    if path == "/fail":

        async def fail() -> Answer:
            raise RuntimeError("boom")

        return fail()
    return 200, orjson.dumps({"path": path})


async def test_awaited_answers_keep_request_order_behind_and_before_synchronous_ones() -> None:
    listener = Listener(mixed)
    await listener.start("127.0.0.1", 0, None)
    try:
        reader, writer = await connect(listener)
        order = ["/slow/50", "/now", "/slow/10", "/fail", "/after"]
        writer.write(b"".join(post(path, b"x") for path in order))
        answers = [await read_answer(reader) for _ in order]
        assert [status for status, _, _ in answers] == [200, 200, 200, 500, 200]
        assert [orjson.loads(body).get("path") for _, _, body in answers] == [
            "/slow/50",
            "/now",
            "/slow/10",
            None,
            "/after",
        ]
        writer.write(post("/now", b"x"))  # back on the synchronous path once nothing is awaited
        assert (await read_answer(reader))[0] == 200
        writer.close()
    finally:
        await listener.stop(grace=1)


async def test_stop_waits_for_an_awaited_answer() -> None:
    listener = Listener(mixed)
    await listener.start("127.0.0.1", 0, None)
    reader, writer = await connect(listener)
    writer.write(post("/slow/200", b"x"))
    await asyncio.sleep(0.05)
    stopping = asyncio.create_task(listener.stop(grace=5))
    status, headers, _ = await read_answer(reader)
    assert status == 200
    assert headers["connection"] == "close"
    await stopping
    writer.close()


async def test_a_stop_cancelled_as_the_last_connection_ends_stops() -> None:
    """The graceful stop waits for connections in a request; cancelled in the loop step the last one ends, it
    must end cancelled: Python 3.11's wait_for returned instead and the stop went on as if not asked to end, and
    a cancel a step later was taken for the connection sweeper's own and suppressed."""

    listeners: list[Listener] = []

    def attempt() -> tuple[Coroutine[Any, Any, Any], Callable[[], object]]:
        listener = Listener(mixed)
        listeners.append(listener)
        busy: list[Connection] = []

        async def stopping() -> None:
            await listener.start("127.0.0.1", 0, None)
            busy.append(Connection(listener, "127.0.0.1"))
            busy[0].started = 0.0  # a request in progress: the stop waits for it
            listener.connections.add(busy[0])
            await listener.stop(grace=30)

        return stopping(), lambda: listener.forget(busy[0])

    try:
        await assert_cancel_is_kept(attempt)
    finally:
        for listener in listeners:  # a cancelled stop leaves its connection sweeper to whoever cancelled it
            if listener._sweeper is not None:
                listener._sweeper.cancel()
