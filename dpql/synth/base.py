"""The one interface every synthesizer backend implements, and the registry that finds them.

A backend is a small bundle (in the way optax bundles ``init``/``update``) with two stages:

* ``plan(ctx: PlanContext, options=None) -> SynthPlan``: JAX-free and data-free. From the
  spec (or the ``options`` given), the resolved workload and the rho its phase may spend, it
  fixes everything the run will do: its budget table lines (the ledger events it will
  append), its resource cost, and a backend-specific frozen ``config`` handed back to ``run``.
  ``dpql plan`` and ``dpql check`` stop here.
* ``run(plan: SynthPlan, ctx: RunContext) -> SynthResult``: the program. It reaches private
  data only through ``ctx.private`` (the measurement oracle, or DP-SGD's row access), draws
  DP noise only from ``ctx.noise`` and appends every mechanism call to ``ctx.ledger``; its
  imports (JAX) happen inside it.

Every backend is a package ``dpql/synth/<name>/`` of the same shape: ``__init__.py`` holds its
``BACKEND`` (name, :class:`Traits`, ``declared_budget``, ``plan``, ``run``), ``plan.py`` its
JAX-free planning and cost model, ``program.py`` the run (JAX and other heavy imports load
there, when a release runs). Backends register by name in :data:`BACKENDS`, imported lazily on
first use, so adding one is its package plus its options model and its name in
:mod:`dpql.spec.models` (``METHODS``).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from dpql.progress import Progress
from dpql.spec.models import METHODS

if TYPE_CHECKING:
    from dpql.answers import NoisyAnswer
    from dpql.domain import EncodedTable
    from dpql.ir.oracle import MeasurementOracle
    from dpql.ir.queries import Query
    from dpql.privacy.budget import BudgetLine
    from dpql.privacy.ledger import Ledger
    from dpql.privacy.noise import NoiseSource
    from dpql.spec.load import LoadedSpec


@dataclass(frozen=True)
class PlanContext:
    """What a backend's ``plan`` sees: public facts only (no data path is ever opened)."""

    spec: LoadedSpec
    queries: tuple[Query, ...]
    epsilon: float  # the release's budget
    delta: float
    phase_rho: Mapping[str, float]  # rho per phase; the backend's is ``"synthesizer"``


@dataclass(frozen=True)
class SynthCost:
    """A backend's share of compile's resource estimate (:mod:`dpql.plan.resources`)."""

    parts: Mapping[str, float] = field(default_factory=dict)  # peak bytes per named part
    seconds: float = 0.0
    extra_queries: tuple[Query, ...] = ()  # queries answered besides the workload
    sampling: float = 0.0  # peak bytes while the backend draws its output rows (after the fit)


@dataclass(frozen=True)
class SynthPlan:
    """A backend's part of the release plan, fixed before any data is read."""

    method: str
    lines: tuple[BudgetLine, ...]  # its rows of the budget table
    config: Any  # backend-specific, frozen; handed back to ``run``
    cost: SynthCost = SynthCost()
    options: Mapping[str, Any] = field(default_factory=dict)  # for the provenance record


class PrivateData(Protocol):
    """The private table as the data layer hands it out (:func:`dpql.data.open_private`)."""

    @property
    def oracle(self) -> MeasurementOracle: ...

    def rows(self) -> AbstractContextManager[Any]:
        """DP-SGD's row access (in memory, or an out-of-core row store)."""
        ...

    def public_table(self, path: Path) -> EncodedTable:
        """A public table (e.g. an external synthetic one) checked against the schema."""
        ...


@dataclass(frozen=True, eq=False)
class RunContext:
    """What a backend's ``run`` gets: the plan's inputs, the private handle, noise and ledger.
    ``seed`` fixes optimisation and sampling of synthetic rows, never DP noise."""

    spec: LoadedSpec
    queries: tuple[Query, ...]
    private: PrivateData
    noise: NoiseSource
    ledger: Ledger
    seed: int
    progress: Progress | None = None


@dataclass(frozen=True, eq=False)
class SynthResult:
    """The synthetic table and the record's ``synthesizer`` section (public values only)."""

    table: EncodedTable
    info: Mapping[str, Any]
    #: the backend's own noisy workload answers -- DP outputs already paid for, handed to
    #: post-processing (which keeps and reports them) for free
    measurements: tuple[NoisyAnswer, ...] = ()


@dataclass(frozen=True)
class Traits:
    """What the planner, the policy check and the record need to know of a backend's privacy
    accounting, fixed per backend (public, data-free)."""

    #: every event it appends is zCDP (Gaussian, Gumbel): the record can state a rho
    zcdp_only: bool = True
    #: its events are known at plan time, so a planned RDP curve can go to the lifetime ledger
    planned_curve: bool = True
    #: it spends part of dpql's budget (else dpql only post-processes its table)
    spends_budget: bool = True


class Synthesizer(Protocol):
    """A synthesizer backend (see the module docstring)."""

    name: str
    traits: Traits

    def declared_budget(self, spec: LoadedSpec) -> tuple[float, float]:
        """(epsilon, delta) spent outside dpql, under replace-one (0, 0 for dpql's own)."""
        ...

    def plan(self, ctx: PlanContext, options: Any = None) -> SynthPlan:
        """The backend's plan with ``options`` (its options model; None: the spec's own, as
        ``synthesizer.options`` gives them; ``method: auto`` passes the chosen backend's
        defaults)."""
        ...

    def run(self, plan: SynthPlan, ctx: RunContext) -> SynthResult: ...


#: method -> its package (``dpql.spec.models.METHODS``: the one list of methods)
BACKENDS: Mapping[str, str] = {name: f"dpql.synth.{name}" for name in METHODS}


def backend(name: str) -> Synthesizer:
    """The backend registered as ``name`` (its package's ``BACKEND``, imported on first use)."""
    return importlib.import_module(BACKENDS[name]).BACKEND


def names() -> Iterator[str]:
    return iter(BACKENDS)
