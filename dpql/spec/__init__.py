"""dpql.spec: the release spec and policy, loaded from YAML with a position on every value.

Public API: :func:`load_spec`, :func:`load_policy`, :func:`normalised_spec_json`,
:class:`LoadedSpec`, :class:`LoadedPolicy`, :class:`Located`, the models in
:mod:`dpql.spec.models` and the code table :data:`dpql.spec.codes.CODES`.
"""

from dpql.spec.codes import CODES
from dpql.spec.load import (
    LoadedPolicy,
    LoadedSpec,
    build_domain,
    load_policy,
    load_spec,
    normalised_spec_json,
    spec_sha256,
)
from dpql.spec.models import Policy, ReleaseSpec
from dpql.spec.yamlpos import Located

__all__ = [
    "CODES",
    "LoadedPolicy",
    "LoadedSpec",
    "Located",
    "Policy",
    "ReleaseSpec",
    "build_domain",
    "load_policy",
    "load_spec",
    "normalised_spec_json",
    "spec_sha256",
]
