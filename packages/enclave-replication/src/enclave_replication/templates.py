"""Generators: Jinja2 templates rendered in a sandbox into one or several YAML manifests.

Why Jinja2's ``SandboxedEnvironment`` (docs/decisions/0002-replication-templates.md): TenantResources are
written by tenant owners, so a template is untrusted input running inside the controller. The sandbox refuses
access to Python internals (``__class__``, ``__globals__``, unsafe methods), ``range`` is capped by Jinja2, and
the output is capped here at :data:`MAX_OUTPUT` characters, streamed, so a runaway loop stops early. What a
template costs is bounded elsewhere: the controller renders only in :mod:`enclave_replication.sandbox`'s worker
processes, with a CPU, memory and wall-time budget.

The context (documented in packages/enclave-replication/README.md and the ``Template`` model):

* ``tenant``: the Tenant object (``tenant.metadata.name``, ``tenant.metadata.labels``, ``tenant.spec``), or
  None for a GlobalTenantResource of scope ``None``;
* ``namespace``: the target Namespace object for scope ``Namespace`` (always for a TenantResource), else None;
* every ``context.resources`` entry under its ``index`` (default: the kind in lower case): one object (or None
  when a missing object is optional) when the entry names an object, else the list of selected objects;
  ``kind: "*"`` (default index ``all``) is always a list, the objects of every kind with their ``kind``.

``missingKey`` follows Go's template option of the same name: ``zero`` renders a missing key as an empty string
(the default), ``invalid`` as ``<no value>``, ``error`` fails the item. Filters beyond Jinja2's own: ``toyaml``,
``b64enc``, ``b64dec``, ``quote``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import yaml
from jinja2 import ChainableUndefined, StrictUndefined, TemplateError, Undefined
from jinja2.sandbox import SandboxedEnvironment

if TYPE_CHECKING:
    # Only the type: the render worker (enclave_replication.sandbox_worker) imports this module and should not
    # pay for pydantic and the API models.
    from enclave_core.api.replication import MissingKey

MAX_OUTPUT: Final = 1 << 20
"""Characters a template may produce."""


class RenderError(Exception):
    """The template does not compile, fails, or produces something that is not a list of manifests; or (from
    :mod:`enclave_replication.sandbox`) it exceeded a budget. ``reason`` is the CamelCase cause status reports."""

    def __init__(self, message: str, reason: str = "RenderFailed") -> None:
        super().__init__(message)
        self.reason = reason


class _InvalidUndefined(ChainableUndefined):
    """``missingKey: invalid``: print Go's ``<no value>``."""

    def __str__(self) -> str:
        return "<no value>"


def _b64enc(value: Any) -> str:
    data = value.encode() if isinstance(value, str) else bytes(value)
    return base64.b64encode(data).decode()


def _b64dec(value: str) -> str:
    return base64.b64decode(value).decode()


def _toyaml(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=False, sort_keys=False).rstrip("\n")


def _quote(value: Any) -> str:
    return json.dumps("" if isinstance(value, Undefined) else str(value))


def _environment(undefined: type[Undefined]) -> SandboxedEnvironment:
    env = SandboxedEnvironment(undefined=undefined, autoescape=False, keep_trailing_newline=True)
    env.filters.update(toyaml=_toyaml, b64enc=_b64enc, b64dec=_b64dec, quote=_quote)
    return env


_ENVIRONMENTS: Final[dict[str, SandboxedEnvironment]] = {
    "zero": _environment(ChainableUndefined),
    "invalid": _environment(_InvalidUndefined),
    "error": _environment(StrictUndefined),
}


def render(template: str, context: Mapping[str, Any], missing_key: MissingKey = "zero") -> str:
    """The template's text output; :class:`RenderError` with the template's own message on failure."""
    env = _ENVIRONMENTS[missing_key]
    try:
        compiled = env.from_string(template)
        size = 0
        parts: list[str] = []
        for chunk in compiled.generate(dict(context)):
            size += len(chunk)
            if size > MAX_OUTPUT:
                raise RenderError(f"output exceeds {MAX_OUTPUT} characters")
            parts.append(chunk)
    except TemplateError as err:
        line = getattr(err, "lineno", None)
        where = f" (line {line})" if line else ""
        raise RenderError(f"{type(err).__name__}{where}: {err.message or err}") from err
    except (ValueError, TypeError, ArithmeticError, LookupError) as err:
        raise RenderError(f"{type(err).__name__}: {err}") from err
    return "".join(parts)


def manifests(text: str) -> list[dict[str, Any]]:
    """The YAML documents of ``text`` (empty documents skipped); each must be a mapping."""
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as err:
        raise RenderError(f"output is not YAML: {err}") from err
    result: list[dict[str, Any]] = []
    for index, document in enumerate(documents):
        if document is None:
            continue
        if not isinstance(document, dict):
            raise RenderError(f"document {index} is a {type(document).__name__}, not a manifest")
        result.append(document)
    return result
