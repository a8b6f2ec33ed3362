"""ServiceConfiguration validation (``/serviceconfigurations``): what the CRD schema cannot check.

The rules live in enclave-core (:func:`enclave_core.api.validation.service_configuration_problems`), shared
with the config component, which reports the same problems in status: the webhook and the controller can never
disagree about what is valid.
"""

from __future__ import annotations

from pydantic import ValidationError

from enclave_admission.review import AdmissionRequest, Decision
from enclave_admission.state import State
from enclave_core.api.configuration import ServiceConfigurationSpec
from enclave_core.api.validation import service_configuration_problems, validation_message


def validate(request: AdmissionRequest, _state: State) -> Decision:
    if request.operation not in ("CREATE", "UPDATE") or request.obj is None or request.sub_resource:
        return Decision.allow()
    name = request.name
    try:
        spec = ServiceConfigurationSpec.model_validate(request.obj.get("spec") or {})
    except ValidationError as err:
        details = validation_message(err, under="spec.")
        return Decision.deny("InvalidConfiguration", f"ServiceConfiguration {name!r} is invalid: {details}")
    problems = service_configuration_problems(spec)
    if problems:
        details = "; ".join(str(problem) for problem in problems)
        return Decision.deny("InvalidConfiguration", f"ServiceConfiguration {name!r} is invalid: {details}")
    return Decision.allow()
