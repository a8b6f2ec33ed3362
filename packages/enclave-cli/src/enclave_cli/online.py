"""Verbs that talk to a cluster through a kubeconfig."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

Verb = Callable[[str, str, str, Callable[[argparse.Namespace], int]], argparse.ArgumentParser]


def add_verbs(verb: Verb) -> Any:
    return None
