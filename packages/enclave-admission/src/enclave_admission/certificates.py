"""The serving certificate, swapped in place when it is renewed: no restart, no failed call.

The webhook listener binds one ``ssl.SSLContext`` to its socket for the life of the process. OpenSSL copies the
context's certificate and key into each new connection when the connection is created, so calling
``load_cert_chain`` again on the *same* context makes every later handshake present the new certificate while
connections already open finish with the old one (same CA, so both verify). That is the whole renewal
mechanism; nothing is torn down.

Two sources, one of them per process:

* files (``--tls-cert-file``/``--tls-key-file``), polled: kubelet swaps a mounted Secret's files atomically
  (a symlink flip), so a changed content hash is a complete new pair;
* a Secret (``--tls-secret-name``), watched through an informer (a watch, not a read per request). The config
  component writes ``enclave-tls`` (``tls.crt``, ``tls.key``, ``ca.crt``) and renews it well before expiry.

A pair that does not load (a half-written file, a key that does not match) is logged and skipped: it is tried
on a scratch context first, so the live context keeps serving the previous, valid certificate.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import logging
import os
import ssl
import tempfile
from pathlib import Path

from prometheus_client import Counter, Gauge

from enclave_core.kube.informer import Informer
from enclave_core.kube.rest import Kube, resource_path

log = logging.getLogger(__name__)

RELOADS = Counter("enclave_admission_certificate_loads_total", "Serving certificate loads", ["result"])
LOADED_AT = Gauge("enclave_admission_certificate_loaded_timestamp_seconds", "When the serving certificate was loaded")


class ServingCertificate:
    """An SSLContext for the webhook listener whose certificate chain can be replaced at any time."""

    def __init__(self) -> None:
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context.set_alpn_protocols(["http/1.1"])
        self.loaded = asyncio.Event()
        self.fingerprint = ""

    def require_clients(self, ca_file: str) -> None:
        """Make every handshake ask for a client certificate signed by a CA of ``ca_file`` (kube-apiserver's
        webhook client certificate). One that is presented must verify, or the handshake fails. One that is not
        presented still completes the handshake (``CERT_OPTIONAL``), because kube-apiserver calls conversion
        webhooks without a certificate; the listener then serves that connection ``/convert`` alone
        (:attr:`enclave_admission.listener.Limits.open_paths`; the reasoning is in
        packages/enclave-admission/README.md, "Conversion without a client certificate"). Read
        once; to rotate the CA, put the old and the new one in the bundle, then restart with the new one alone."""
        self.context.load_verify_locations(cafile=ca_file)
        self.context.verify_mode = ssl.CERT_OPTIONAL
        log.info("webhook clients must present a certificate", extra={"ca_file": ca_file})

    def load(self, cert_pem: bytes, key_pem: bytes) -> bool:
        """Make (cert_pem, key_pem) the certificate of new handshakes; False when it is unchanged or invalid."""
        fingerprint = hashlib.sha256(cert_pem + b"\0" + key_pem).hexdigest()
        if fingerprint == self.fingerprint:
            return False
        # load_cert_chain only reads files: write the pair to a private directory just long enough to load it.
        with tempfile.TemporaryDirectory(prefix="enclave-tls-") as directory:
            cert_file, key_file = Path(directory, "tls.crt"), Path(directory, "tls.key")
            cert_file.write_bytes(cert_pem)
            descriptor = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(key_pem)
            try:
                # A scratch context first: OpenSSL installs the certificate before it checks the key, so a
                # mismatched pair loaded straight into the live context would leave it unable to handshake.
                ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert_file, key_file)
                self.context.load_cert_chain(cert_file, key_file)
            except (ssl.SSLError, OSError) as err:
                RELOADS.labels("invalid").inc()
                log.warning("serving certificate not loaded; keeping the previous one", extra={"error": str(err)})
                return False
        self.fingerprint = fingerprint
        RELOADS.labels("loaded").inc()
        LOADED_AT.set_to_current_time()
        log.info("serving certificate loaded", extra={"sha256": fingerprint[:16]})
        self.loaded.set()
        return True

    async def watch_files(self, cert_file: str, key_file: str, interval: float = 1.0) -> None:
        """Load the pair now and whenever the files change; until cancelled."""
        while True:
            try:
                cert, key = await asyncio.to_thread(_read_pair, cert_file, key_file)
                self.load(cert, key)
            except OSError as err:
                log.warning("cannot read the serving certificate files", extra={"error": str(err)})
            await asyncio.sleep(interval)

    async def watch_secret(self, kube: Kube, namespace: str, name: str) -> None:
        """Load ``tls.crt``/``tls.key`` of Secret ``namespace/name`` now and on every change; until cancelled."""
        key = f"{namespace}/{name}"

        def changed(changed_key: str) -> None:
            if changed_key != key:
                return
            secret = informer.get(key)
            data = (secret or {}).get("data") or {}
            if "tls.crt" not in data or "tls.key" not in data:
                log.warning("TLS secret lacks tls.crt or tls.key", extra={"secret": key})
                return
            with contextlib.suppress(ValueError):
                self.load(base64.b64decode(data["tls.crt"]), base64.b64decode(data["tls.key"]))

        informer = Informer(
            kube,
            resource_path("v1", "secrets", namespace=namespace),
            field_selector=f"metadata.name={name}",
            on_change=changed,
            name=f"secret/{name}",
        )
        await informer.run()


def _read_pair(cert_file: str, key_file: str) -> tuple[bytes, bytes]:
    return Path(cert_file).read_bytes(), Path(key_file).read_bytes()
