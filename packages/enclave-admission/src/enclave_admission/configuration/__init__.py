"""ServiceConfiguration: the checks its CRD schema cannot express."""
