"""A minimal HTTPS admission webhook for tests of the apiserver-to-webhook path: it denies with a fixed message.

Used where a test needs kube-apiserver to call *something* over HTTPS with a given certificate (the harness
proof, the generated CA bundle) without depending on Enclave's own admission server.
"""

from __future__ import annotations

import json
import ssl
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class DenyingWebhook:
    """Serves AdmissionReview v1 on every path, denying with ``message``; records the paths called."""

    def __init__(self, cert_pem: bytes, key_pem: bytes, message: str) -> None:
        self.message = message
        self.calls: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.calls.append(self.path)
                body = json.dumps(
                    {
                        "apiVersion": "admission.k8s.io/v1",
                        "kind": "AdmissionReview",
                        "response": {
                            "uid": review["request"]["uid"],
                            "allowed": False,
                            "status": {"code": 403, "message": outer.message},
                        },
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        with tempfile.TemporaryDirectory() as tmp:
            cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
            cert.write_bytes(cert_pem)
            key.write_bytes(key_pem)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(cert, key)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> DenyingWebhook:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def url(self, path: str = "") -> str:
        return f"https://127.0.0.1:{self.port}{path}"


def namespace_creation_review(user: str, groups: list[str], metadata: dict[str, Any]) -> dict[str, Any]:
    """The AdmissionReview kube-apiserver sends when ``user`` (in ``groups``) creates a Namespace with
    ``metadata``: for tests that call an admission server directly, as the apiserver would (or as a forger
    would)."""
    import uuid

    name = metadata["name"]
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Namespace"},
            "resource": {"group": "", "version": "v1", "resource": "namespaces"},
            "name": name,
            "operation": "CREATE",
            "userInfo": {"username": user, "groups": groups},
            "object": {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata},
        },
    }
