"""Verbs that talk to a cluster through a kubeconfig: tenants, cordon/uncordon, promote, quota, doctor.

Columns come from the kinds' own printer columns (:data:`enclave_core.api.KINDS_BY_NAME`), so ``enclave`` and
``kubectl get`` agree. A cluster that cannot be reached, or an object that does not exist, is one line and
exit code 2.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from enclave_cli.complete import COMPLETE_VERB, add_arguments
from enclave_cli.complete import run as run_complete
from enclave_cli.documents import InputError
from enclave_cli.output import Style, table
from enclave_core import API_GROUP, API_VERSION
from enclave_core.api import KINDS_BY_NAME, KindInfo, ServiceConfiguration
from enclave_core.api.names import PROMOTED_LABEL
from enclave_core.runtime.options import env_default
from enclave_core.snapshots.configuration import effective

Verb = Callable[[str, str, str, Callable[[argparse.Namespace], int]], argparse.ArgumentParser]
JSON = dict[str, Any]
EXPIRY_WARNING = timedelta(days=30)
QUOTA_KINDS = ("CustomQuota", "GlobalCustomQuota", "GlobalResourceQuota", "ResourcePool", "ResourcePoolClaim")


def _api(args: argparse.Namespace) -> Any:
    from kubernetes import config

    try:
        return config.new_client_from_config(config_file=args.kubeconfig, context=args.context)
    except Exception as err:  # the client raises ConfigException, TypeError or OSError for a bad kubeconfig
        raise InputError(f"cannot load the kubeconfig: {err}") from None


def _call(what: str, function: Callable[..., Any], *call_args: Any, **kwargs: Any) -> Any:
    """A client call whose failure is one line (exit 2), never a traceback."""
    from kubernetes.client.rest import ApiException
    from urllib3.exceptions import HTTPError

    try:
        return function(*call_args, **kwargs)
    except ApiException as err:
        if err.status == 404:
            raise InputError(f"{what}: not found") from None
        reason = err.reason
        with contextlib.suppress(TypeError, ValueError, AttributeError):
            reason = json.loads(err.body).get("message") or reason
        raise InputError(f"{what}: {err.status} {reason}") from None
    except (HTTPError, OSError) as err:
        raise InputError(f"{what}: cannot reach the cluster: {err}") from None


def _field(obj: JSON, path: str) -> str:
    """A printer column's JSON path: dotted fields, plus the ``[?(@.type=="Ready")]`` condition filter."""
    value: Any = obj
    for part in path.strip(".").split("."):
        if "[?(@.type==" in part:
            name, _, rest = part.partition("[")
            wanted = rest.split('"')[1]
            conditions = (value or {}).get(name) or []
            value = next((c for c in conditions if c.get("type") == wanted), None)
            continue
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return ""
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _ready(obj: JSON) -> str:
    conditions = (obj.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    if ready is None:
        return "Unknown"
    return f"{ready.get('status')} ({ready.get('reason')})" if ready.get("reason") else str(ready.get("status"))


def _list(api: Any, info: KindInfo, namespace: str = "") -> list[JSON]:
    from kubernetes import client

    custom = client.CustomObjectsApi(api)
    if info.namespaced and namespace:
        found = _call(
            f"list {info.plural}", custom.list_namespaced_custom_object, API_GROUP, API_VERSION, namespace, info.plural
        )
    else:
        found = _call(f"list {info.plural}", custom.list_cluster_custom_object, API_GROUP, API_VERSION, info.plural)
    return sorted(found.get("items") or [], key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))


def _kind_table(info: KindInfo, items: list[JSON], wide: bool = True) -> str:
    columns = [c for c in info.columns if c.name not in ("Age", "Ready") and (wide or not c.priority)]
    headers = (["NAMESPACE"] if info.namespaced else []) + ["NAME"] + [c.name.upper() for c in columns] + ["READY"]
    rows = []
    for obj in items:
        meta = obj["metadata"]
        row = ([meta.get("namespace", "")] if info.namespaced else []) + [meta["name"]]
        row += [_field(obj, c.json_path) for c in columns] + [_ready(obj)]
        rows.append(row)
    return table(headers, rows)


# -- tenants, cordon, promote ------------------------------------------------------------------------------


def _tenants(args: argparse.Namespace) -> int:
    info = KINDS_BY_NAME["Tenant"]
    items = _list(_api(args), info)
    if args.output == "json":
        print(json.dumps([_tenant_row(obj) for obj in items], indent=2))
        return 0
    if not items:
        print("no tenants")
        return 0
    rows = [[str(v) for v in _tenant_row(obj).values()] for obj in items]
    print(table(["NAME", "NAMESPACES", "QUOTA", "CORDONED", "READY", "OWNERS"], rows))
    return 0


def _tenant_row(obj: JSON) -> JSON:
    status = obj.get("status") or {}
    spec = obj.get("spec") or {}
    quota = (spec.get("namespaceOptions") or {}).get("quota")
    owners = ", ".join(f"{o.get('kind')} {o.get('name')}" for o in status.get("owners") or spec.get("owners") or [])
    return {
        "name": obj["metadata"]["name"],
        "namespaces": status.get("size", 0),
        "quota": "-" if quota is None else quota,
        "cordoned": bool(spec.get("cordoned")),
        "ready": _ready(obj),
        "owners": owners or "-",
    }


def _cordon(args: argparse.Namespace, cordoned: bool) -> int:
    from kubernetes import client

    custom = client.CustomObjectsApi(_api(args))
    verb = "cordon" if cordoned else "uncordon"
    current = _call(
        f"tenant {args.tenant!r}", custom.get_cluster_custom_object, API_GROUP, API_VERSION, "tenants", args.tenant
    )
    if bool((current.get("spec") or {}).get("cordoned")) == cordoned:
        print(f"tenant {args.tenant} is already {verb}ed")
        return 0
    _call(
        f"{verb} tenant {args.tenant!r}",
        custom.patch_cluster_custom_object,
        API_GROUP,
        API_VERSION,
        "tenants",
        args.tenant,
        {"spec": {"cordoned": cordoned}},
    )
    what = "no namespace can be created or deleted in it" if cordoned else "namespaces can be created and deleted again"
    print(f"tenant {args.tenant} {verb}ed: {what}")
    return 0


def _cordoning(cordoned: bool) -> Callable[[argparse.Namespace], int]:
    return lambda args: _cordon(args, cordoned)


def _promote(args: argparse.Namespace) -> int:
    from kubernetes import client

    namespace, _, name = args.account.rpartition("/")
    namespace = namespace or args.namespace
    if not namespace or not name:
        raise InputError("name the service account as NAMESPACE/NAME (or give --namespace)")
    value = None if args.undo else "true"
    core = client.CoreV1Api(_api(args))
    _call(
        f"service account {namespace}/{name}",
        core.patch_namespaced_service_account,
        name,
        namespace,
        {"metadata": {"labels": {PROMOTED_LABEL: value}}},
    )
    if args.undo:
        print(f"service account {namespace}/{name} is no longer promoted")
    else:
        print(
            f"service account {namespace}/{name} promoted: it owns its namespace's tenant once enclave-tenants sees it"
        )
    return 0


def _quota(args: argparse.Namespace) -> int:
    api = _api(args)
    printed = False
    for kind in QUOTA_KINDS:
        info = KINDS_BY_NAME[kind]
        items = _list(api, info, args.namespace or "")
        if args.namespace and not info.namespaced:
            items = [o for o in items if args.namespace in ((o.get("status") or {}).get("namespaces") or [])]
        if not items:
            continue
        if printed:
            print()
        print(Style.for_stream().bold(f"{info.kind}s"))
        print(_kind_table(info, items))
        printed = True
    if not printed:
        where = f" covering namespace {args.namespace}" if args.namespace else ""
        print(f"no custom quotas, global quotas or resource pools{where}")
    return 0


# -- doctor ------------------------------------------------------------------------------------------------


class Report:
    def __init__(self, style: Style) -> None:
        self.style = style
        self.failed = 0
        self.lines: list[str] = []

    def ok(self, message: str) -> None:
        self.lines.append(f"{self.style.green('ok  ')}  {message}")

    def warn(self, message: str) -> None:
        self.lines.append(f"{self.style.bold('warn')}  {message}")

    def fail(self, message: str) -> None:
        self.failed += 1
        self.lines.append(f"{self.style.red('FAIL')}  {message}")


def _certificate_expiry(pem: bytes) -> tuple[datetime, str]:
    from cryptography import x509

    certificate = x509.load_pem_x509_certificate(pem)
    return certificate.not_valid_after_utc, certificate.subject.rfc4514_string()


def _expiry(report: Report, what: str, pem: bytes, now: datetime) -> None:
    try:
        expires, subject = _certificate_expiry(pem)
    except ValueError as err:
        report.fail(f"{what}: not a PEM certificate ({err})")
        return
    left = expires - now
    if left <= timedelta(0):
        report.fail(f"{what} ({subject}) expired on {expires:%Y-%m-%d %H:%M} UTC")
    elif left < EXPIRY_WARNING:
        report.warn(f"{what} ({subject}) expires in {left.days} day(s), on {expires:%Y-%m-%d}")
    else:
        report.ok(f"{what} ({subject}) valid until {expires:%Y-%m-%d} ({left.days} days)")


def _doctor(args: argparse.Namespace) -> int:
    from kubernetes import client

    api = _api(args)
    report = Report(Style.for_stream())
    now = datetime.now(UTC)
    custom = client.CustomObjectsApi(api)
    extensions = client.ApiextensionsV1Api(api)
    crds = {c.metadata.name for c in _call("list CRDs", extensions.list_custom_resource_definition).items}
    missing = sorted(info.crd_name for info in KINDS_BY_NAME.values() if info.crd_name not in crds)
    if missing:
        report.fail(f"CRDs missing: {', '.join(missing)}")
    else:
        report.ok(f"all {len(KINDS_BY_NAME)} Enclave CRDs installed")
    raw = _call(
        f"ServiceConfiguration {args.config!r}",
        custom.get_cluster_custom_object,
        API_GROUP,
        API_VERSION,
        "serviceconfigurations",
        args.config,
    )
    ready = _ready(raw)
    (report.ok if ready.startswith("True") else report.fail)(f"ServiceConfiguration {args.config}: Ready {ready}")
    config = effective(args.config, 0, ServiceConfiguration.model_validate(raw).spec)
    secret_name = config.spec.overrides.tls_secret_name
    secret = None
    try:
        secret = _call(
            f"Secret {args.enclave_namespace}/{secret_name}",
            client.CoreV1Api(api).read_namespaced_secret,
            secret_name,
            args.enclave_namespace,
        )
    except InputError as err:
        report.fail(str(err))
    ca_pem = b""
    if secret is not None:
        data = secret.data or {}
        ca_pem = base64.b64decode(data.get("ca.crt", ""))
        for key, what in (("tls.crt", "serving certificate"), ("ca.crt", "webhook CA")):
            if key in data:
                _expiry(report, f"{what} in {args.enclave_namespace}/{secret_name}", base64.b64decode(data[key]), now)
            else:
                report.fail(f"Secret {args.enclave_namespace}/{secret_name} has no {key}")
    registrations = client.AdmissionregistrationV1Api(api)
    registered: set[str] = set()
    for side, name, read in (
        ("mutating", config.mutating_configuration_name, registrations.read_mutating_webhook_configuration),
        ("validating", config.validating_configuration_name, registrations.read_validating_webhook_configuration),
    ):
        wanted = getattr(config.spec.admission, side, None) if config.spec.admission else None
        try:
            found = _call(f"{side} webhook configuration {name!r}", read, name)
        except InputError as err:
            (report.fail if wanted is not None else report.warn)(str(err))
            continue
        hooks = found.webhooks or []
        without = [h.name for h in hooks if not (h.client_config.ca_bundle or "")]
        if without:
            report.fail(f"{side} webhook configuration {name}: no caBundle on {', '.join(without)}")
        else:
            report.ok(f"{side} webhook configuration {name}: {len(hooks)} webhook(s), every one with a caBundle")
        bundles = {h.client_config.ca_bundle for h in hooks if h.client_config.ca_bundle}
        for bundle in sorted(bundles):
            pem = base64.b64decode(bundle)
            if ca_pem and ca_pem.strip() not in pem:
                report.warn(f"{side} webhook configuration {name}: caBundle is not the CA in {secret_name}")
        registered.update(h.name for h in hooks)
    _component_hooks(report, api, args.enclave_namespace, registered, now)
    _grpc_checks(report, args)
    _access(report, api)
    print("\n".join(report.lines))
    return 1 if report.failed else 0


def _component_hooks(report: Report, api: Any, namespace: str, registered: set[str], now: datetime) -> None:
    """Every component that runs has the hooks that judge its kinds registered.

    A component runs when its Lease (``enclave-<component>`` in Enclave's namespace) is held and was renewed
    within twice its duration. A component whose hooks are missing is the silent failure: its controller
    converges while nothing refuses what breaks its kinds (a GlobalResourceQuota over-admitted)."""
    from kubernetes import client

    from enclave_admission.defaults import hooks_by_component

    leases = _call(f"Leases in {namespace}", client.CoordinationV1Api(api).list_namespaced_lease, namespace).items
    running: list[str] = []
    for lease in leases:
        component = (lease.metadata.name or "").removeprefix("enclave-")
        spec = lease.spec
        if not lease.metadata.name.startswith("enclave-") or spec is None or not spec.holder_identity:
            continue
        renewed = spec.renew_time or spec.acquire_time
        duration = timedelta(seconds=2 * (spec.lease_duration_seconds or 15))
        if renewed is not None and now - renewed <= duration:
            running.append(component)
    needs = hooks_by_component()
    for component in sorted(running):
        wanted = needs.get(component)
        if not wanted:
            continue
        missing = sorted(wanted - registered)
        if missing:
            report.fail(f"enclave-{component} runs but its hooks are not registered: {', '.join(missing)}")
        else:
            report.ok(f"enclave-{component} runs and its {len(wanted)} hook(s) are registered")


def _grpc_checks(report: Report, args: argparse.Namespace) -> None:
    """gRPC health and published snapshot revisions of every ``--grpc`` endpoint (mutual TLS when given the
    CA and a client certificate), then the revisions each ``--admission-probe`` decides from."""
    import grpc

    from enclave_cli import grpccheck

    try:
        tls = grpccheck.Tls.from_files(
            args.grpc_ca_file, args.grpc_client_cert, args.grpc_client_key, args.grpc_server_name
        )
    except OSError as err:
        raise InputError(f"cannot read the gRPC TLS files: {err}") from None
    if tls is not None and not (args.grpc_client_cert and args.grpc_client_key):
        raise InputError("--grpc-ca-file needs --grpc-client-cert and --grpc-client-key (the streams are mutual TLS)")
    mode = "mutual TLS" if tls is not None else "plaintext"
    latest: dict[str, int] = {}
    for target in args.grpc or []:
        name, _, address = target.rpartition("=")
        name = name or address
        chan = grpccheck.channel(address, tls)
        try:
            status = grpccheck.health(chan)
            (report.ok if status == "SERVING" else report.fail)(f"{name} ({address}, {mode}) gRPC health: {status}")
            if status != "SERVING":
                continue
            streams = grpccheck.published(chan)
            for stream in streams:
                latest[stream.kind] = max(latest.get(stream.kind, 0), stream.revision)
            shown = ", ".join(f"{s.kind} revision {s.revision}" for s in streams) or "no snapshot stream"
            report.ok(f"{name} publishes {shown}")
        except grpc.RpcError as err:
            detail = err.details() if hasattr(err, "details") else ""
            report.fail(f"{name} ({address}, {mode}) gRPC: {err.code().name}" + (f": {detail}" if detail else ""))
        finally:
            chan.close()
    for url in args.admission_probe or []:
        try:
            revisions, ready = grpccheck.admission_revisions(url)
        except OSError as err:
            report.fail(f"admission probes at {url}: {err}")
            continue
        # "ok; degraded: ..." is a ready replica whose optional publishers are away: the hooks that read them fail
        # closed on their own, every other hook decides (docs/architecture.md, "Who an outage blocks").
        verdict = report.ok if ready == "ok" else report.warn if ready.startswith("ok; degraded") else report.fail
        verdict(f"admission at {url} /readyz: {ready}")
        for kind, revision in sorted(revisions.items()):
            published = latest.get(kind)
            if published is None:
                report.ok(f"admission at {url} decides from {kind} revision {revision}")
            elif revision == published:
                report.ok(f"admission at {url} decides from {kind} revision {revision}, the published one")
            else:
                report.warn(
                    f"admission at {url} decides from {kind} revision {revision}, its publisher is at {published} "
                    "(normal for a moment after a change or a publisher restart; persistent: check the stream)"
                )


_ACCESS = (
    ("list", API_GROUP, "tenants", "enclave tenants"),
    ("patch", API_GROUP, "tenants", "enclave cordon/uncordon"),
    ("patch", "", "serviceaccounts", "enclave promote"),
    ("list", API_GROUP, "customquotas", "enclave quota"),
)


def _access(report: Report, api: Any) -> None:
    """The current user's RBAC for what the verbs do (SelfSubjectAccessReview)."""
    from kubernetes import client

    authorization = client.AuthorizationV1Api(api)
    for verb, group, resource, uses in _ACCESS:
        review = {"spec": {"resourceAttributes": {"verb": verb, "group": group, "resource": resource}}}
        answer = _call("SelfSubjectAccessReview", authorization.create_self_subject_access_review, review)
        if answer.status.allowed:
            report.ok(f"you may {verb} {resource} ({uses})")
        else:
            report.warn(f"you may not {verb} {resource}: {uses} will be refused")


# -- registration ------------------------------------------------------------------------------------------


def _cluster_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")


def add_verbs(verb: Verb) -> None:
    tenants = verb(
        "tenants",
        "list tenants: namespaces, quota, cordoned, Ready, owners",
        "examples:\n  enclave tenants\n  enclave tenants -o json --context prod",
        _tenants,
    )
    tenants.add_argument("--output", "-o", choices=("table", "json"), default="table")
    _cluster_flags(tenants)
    for name, cordoned in (("cordon", True), ("uncordon", False)):
        sub = verb(
            name,
            f"{name} a tenant: {'stop' if cordoned else 'allow again'} namespace creation and deletion in it",
            f"examples:\n  enclave {name} acme",
            _cordoning(cordoned),
        )
        sub.add_argument("tenant")
        _cluster_flags(sub)
    promote = verb(
        "promote",
        "label a service account enclave.dev/promoted=true (it then owns its namespace's tenant)",
        "examples:\n  enclave promote acme-dev/deployer\n  enclave promote deployer -n acme-dev --undo",
        _promote,
    )
    promote.add_argument("account", metavar="[NAMESPACE/]NAME")
    promote.add_argument("--namespace", "-n", default="")
    promote.add_argument("--undo", action="store_true", help="remove the label instead")
    _cluster_flags(promote)
    quota = verb(
        "quota",
        "custom quotas, global quotas, resource pools and claims as tables",
        "examples:\n  enclave quota\n  enclave quota acme-dev        those in (or covering) namespace acme-dev",
        _quota,
    )
    quota.add_argument("namespace", nargs="?", default="")
    _cluster_flags(quota)
    doctor = verb(
        "doctor",
        "check an installation: CRDs, configuration, webhook configurations and caBundles, certificate "
        "expiry, gRPC health, your RBAC",
        "examples:\n  enclave doctor\n  enclave doctor --config default --grpc tenants=127.0.0.1:9090\n"
        "  enclave doctor --grpc tenants=127.0.0.1:9090 --grpc-server-name enclave-tenants.enclave-system.svc \\\n"
        "      --grpc-ca-file ca.crt --grpc-client-cert tls.crt --grpc-client-key tls.key \\\n"
        "      --admission-probe http://127.0.0.1:8080",
        _doctor,
    )
    doctor.add_argument("--config", default="default", help="the ServiceConfiguration's name")
    doctor.add_argument(
        "--grpc",
        action="append",
        metavar="NAME=HOST:PORT",
        help="a component's gRPC endpoint: its health and the snapshot revisions it publishes; repeatable",
    )
    for flag, env, what in (
        ("--grpc-ca-file", "ENCLAVE_GRPC_CA_FILE", "CA (PEM) of the components' gRPC certificates: speak mutual TLS"),
        ("--grpc-client-cert", "ENCLAVE_GRPC_CLIENT_CERT", "client certificate (PEM) the CA issued"),
        ("--grpc-client-key", "ENCLAVE_GRPC_CLIENT_KEY", "key (PEM) of --grpc-client-cert"),
        ("--grpc-server-name", "ENCLAVE_GRPC_SERVER_NAME", "name to verify in the server certificate (port-forwards)"),
    ):
        doctor.add_argument(flag, default=env_default(env, ""), help=f"{what} (env {env})")
    doctor.add_argument(
        "--admission-probe",
        action="append",
        metavar="URL",
        help="an admission replica's probe listener (http://HOST:PORT): /readyz and the snapshot revisions it "
        "decides from, compared with the publishers'; repeatable",
    )
    _cluster_flags(doctor)
    complete = verb(
        COMPLETE_VERB,
        "(for the completion scripts) print tenant names from the current kubeconfig, or nothing",
        f"examples:\n  enclave {COMPLETE_VERB} tenants --context prod",
        run_complete,
    )
    add_arguments(complete)
