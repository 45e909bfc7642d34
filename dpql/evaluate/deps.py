"""Lazy imports of the report's heavy dependencies (scikit-learn, matplotlib).

Both are in dpql's default install (``pip install -e .``), but the core compiler must not pay
for importing them, so every module here imports them through :func:`require` at call time. A
missing package (a broken or partial environment) becomes a :class:`MissingExtraError` that says
how to install it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# works in a clone (dpql is not on PyPI) and in any environment, with or without dpql's metadata
INSTALL_HINT = "pip install scikit-learn matplotlib (or, from the dpql clone, pip install -e .)"

# distribution name of each top-level module we import lazily
_DIST = {"sklearn": "scikit-learn", "matplotlib": "matplotlib"}


class MissingExtraError(ImportError):
    """A dependency of ``dpql evaluate`` is not installed."""


def require(module: str) -> ModuleType:
    """Import ``module`` (e.g. ``"sklearn.linear_model"``) or raise :class:`MissingExtraError`."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        dist = _DIST.get(module.split(".")[0], module)
        raise MissingExtraError(
            f"dpql evaluate needs {dist}, which is not installed; install it with: {INSTALL_HINT}"
        ) from e


def gan_metrics() -> ModuleType:
    """:mod:`dpql.evaluate.gan_metrics`, the one copy of the DP-auto-GAN metrics (needs sklearn)."""
    require("sklearn")
    return importlib.import_module("dpql.evaluate.gan_metrics")
