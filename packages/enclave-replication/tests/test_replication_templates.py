"""Generators: the three missingKey modes, the sandbox, the output cap and manifest splitting."""

from __future__ import annotations

import pytest

from enclave_core.api.replication import MissingKey
from enclave_replication import templates


def test_missing_key_modes() -> None:
    context = {"tenant": {"metadata": {"name": "a"}}}
    text = "{{ tenant.metadata.name }}-{{ tenant.metadata.absent }}-{{ nothing.deeper }}"
    assert templates.render(text, context, "zero") == "a--"
    assert templates.render(text, context, "invalid") == "a-<no value>-<no value>"
    with pytest.raises(templates.RenderError, match="absent"):
        templates.render(text, context, "error")


@pytest.mark.parametrize(
    "attack",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ tenant.__init__.__globals__ }}",
        "{{ cycler.__init__.__globals__.os }}",
    ],
)
@pytest.mark.parametrize("mode", ["zero", "invalid", "error"])
def test_sandbox_refuses_python_internals(attack: str, mode: MissingKey) -> None:
    """Unsafe attributes are refused (an error) or read as undefined; nothing of Python leaks out."""
    try:
        output = templates.render(attack, {"tenant": {}}, mode)
    except templates.RenderError:
        return
    assert output in ("", "<no value>")


def test_output_is_capped() -> None:
    with pytest.raises(templates.RenderError, match="exceeds"):
        templates.render("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", {}, "zero")


def test_filters_and_several_documents() -> None:
    text = "a: {{ 'hi' | b64enc }}\n---\n\n---\nb:\n  {{ {'k': 1} | toyaml }}\nc: {{ 'x y' | quote }}\n"
    assert templates.manifests(templates.render(text, {})) == [{"a": "aGk="}, {"b": {"k": 1}, "c": "x y"}]


def test_non_mapping_documents_are_refused() -> None:
    with pytest.raises(templates.RenderError, match="not a manifest"):
        templates.manifests("- a\n- b\n")
    with pytest.raises(templates.RenderError, match="not YAML"):
        templates.manifests("a: [")
