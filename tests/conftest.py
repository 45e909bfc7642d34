"""Test configuration: hypothesis runs derandomized so CI is reproducible."""

from hypothesis import settings

settings.register_profile("dpql", derandomize=True, print_blob=True)
settings.load_profile("dpql")
