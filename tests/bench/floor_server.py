"""The benchmark's floor: aiohttp over TLS answering every AdmissionReview with a bare allow.

The stack the admission server was built on first (aiohttp's Application and router over TLS, orjson in and
out) with nothing else: no decision, no metrics, no log line. Measured side by side with the admission server
in one run, it shows what the HTTP layer alone cost, and that the admission server, deciding and logging,
now spends less per review than it did doing nothing.

``python floor_server.py CERT KEY``: listens on a free loopback port and prints ``ready <port>``.
"""

from __future__ import annotations

import asyncio
import ssl
import sys

import orjson
from aiohttp import web


async def allow(http: web.Request) -> web.Response:
    uid = orjson.loads(await http.read())["request"]["uid"]
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": uid, "allowed": True}}
    return web.Response(body=orjson.dumps(body), content_type="application/json")


async def serve(cert: str, key: str) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", allow)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context, backlog=1024)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"ready {port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], sys.argv[2]))
