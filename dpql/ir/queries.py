"""Typed query IR: every query is the average over records of a per-record vector function.

A query ``q`` maps each record ``x`` to a vector ``v(x)`` with entries in [0, 1] (a centred
product's in [-1/4, 1/4]) and answers ``q(D) = (1/n) * sum_{x in D} v(x)`` (the *cells* of the
answer). All thresholds and moments live on the public [0, 1] scale of :mod:`dpql.domain`.

Neighbouring relation (used for every sensitivity below): **replace-one** with the *public* row
count ``n`` from the spec: D and D' have the same n rows and differ in one record. Then

* a vector query whose per-record vector has at most one non-zero entry, at most 1
  (marginals, prefix-by-label, halfspace-by-label) has L1 sensitivity 2/n and L2 sensitivity
  sqrt(2)/n: the changed record leaves one cell and enters another;
* a scalar query with values in [0, 1] (count, moment, prefix without label) has L1 = L2 = 1/n;
* a centred product (:class:`CentredProduct`, values in [-1/4, 1/4]) has L1 = L2 = 1/(2n), a
  centred square (values in [0, 1/4]) 1/(4n).

Queries are frozen, hashable values; their identity is their content, so a plan is reproducible
and can be hashed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar, get_args

from dpql.domain import Domain

# --------------------------------------------------------------------------------------------
# Predicates (resolved: numeric thresholds are on the [0, 1] scale, categories are codes)

CmpOp = Literal["<", "<=", ">", ">="]


@dataclass(frozen=True)
class NumCmp:
    """``u(column) OP threshold`` with ``u`` the column scaled to [0, 1]."""

    column: str
    op: CmpOp
    threshold: float


@dataclass(frozen=True)
class CatIn:
    """``column`` takes one of the category ``codes`` (``==``, ``!=`` and ``in`` resolve here)."""

    column: str
    codes: frozenset[int]


@dataclass(frozen=True)
class And:
    items: tuple[Pred, ...]


@dataclass(frozen=True)
class Or:
    items: tuple[Pred, ...]


@dataclass(frozen=True)
class Not:
    item: Pred


@dataclass(frozen=True)
class TruePred:
    """The predicate that always holds (a moment with no condition)."""


Pred = NumCmp | CatIn | And | Or | Not | TruePred

PRED_TYPES: tuple[type, ...] = get_args(Pred)
"""Every predicate node class: each evaluator's predicate table has an entry for each."""


def pred_columns(p: Pred) -> tuple[str, ...]:
    """Columns a predicate reads, in first-use order."""
    out: list[str] = []

    def walk(q: Pred) -> None:
        if isinstance(q, NumCmp | CatIn):
            if q.column not in out:
                out.append(q.column)
        elif isinstance(q, And | Or):
            for i in q.items:
                walk(i)
        elif isinstance(q, Not):
            walk(q.item)

    walk(p)
    return tuple(out)


# --------------------------------------------------------------------------------------------
# Queries


@dataclass(frozen=True)
class Sensitivity:
    """L1 and L2 sensitivity of one query's answer vector under replace-one neighbours."""

    l1: float
    l2: float


def _vector_sensitivity(n: int) -> Sensitivity:
    return Sensitivity(2.0 / n, math.sqrt(2.0) / n)


def _scalar_sensitivity(n: int) -> Sensitivity:
    return Sensitivity(1.0 / n, 1.0 / n)


@dataclass(frozen=True)
class Marginal:
    """The k-way marginal over ``columns``: cell indicators, numeric columns by public bins.

    Cells are in row-major (C) order of the columns' codes.
    """

    columns: tuple[str, ...]

    kind = "marginal"

    def cells(self, domain: Domain) -> int:
        return domain.cells(self.columns)

    def sensitivity(self, n: int) -> Sensitivity:
        return _vector_sensitivity(n)


@dataclass(frozen=True)
class Prefix:
    """Prefix (range) query: ``1{u_j <= t_j for all j}``, split by the values of ``by``."""

    columns: tuple[str, ...]
    thresholds: tuple[float, ...]
    by: str | None = None

    kind = "prefix"

    def cells(self, domain: Domain) -> int:
        return domain.card(self.by) if self.by else 1

    def sensitivity(self, n: int) -> Sensitivity:
        return _vector_sensitivity(n) if self.by else _scalar_sensitivity(n)


@dataclass(frozen=True)
class Halfspace:
    """Class-conditional halfspace: ``1{<theta, u> > tau} * 1{by = c}`` for each value c of by.

    Vietri et al. 2022, Definitions 4 and 12, with the upper half-space (">") in both the exact
    and the relaxed (tempered-sigmoid) form, so the two agree.
    """

    columns: tuple[str, ...]
    theta: tuple[float, ...]
    tau: float
    by: str

    kind = "halfspace"

    def cells(self, domain: Domain) -> int:
        return domain.card(self.by)

    def sensitivity(self, n: int) -> Sensitivity:
        return _vector_sensitivity(n)


@dataclass(frozen=True)
class Count:
    """Fraction of records satisfying ``predicate``."""

    predicate: Pred

    kind = "count"

    def cells(self, domain: Domain) -> int:
        return 1

    def sensitivity(self, n: int) -> Sensitivity:
        return _scalar_sensitivity(n)


@dataclass(frozen=True)
class Moment:
    """``mean(prod_j u_j * 1{given})`` over at most two numeric ``columns`` on the [0, 1] scale.

    With no columns it is a count; with one a (conditional) first moment; with two a cross
    moment. Values stay in [0, 1], so the sensitivity is that of a scalar query.
    """

    columns: tuple[str, ...]
    given: Pred = TruePred()
    # ``centre`` c (one column only): ``mean((u - c) * 1{given})``, values in [-c, 1 - c], so the
    # sensitivity is unchanged (width 1). A public value on CENTRE_GRID, chosen at compile time
    # from the synthetic table (``dpql.postprocess.centre``); None: the plain moment.
    centre: float | None = None

    kind = "moment"

    def __post_init__(self) -> None:
        if self.centre is not None:
            if len(self.columns) != 1:
                raise ValueError("only a one-column moment can be centred")
            _check_centre(self.centre)

    def cells(self, domain: Domain) -> int:
        return 1

    def sensitivity(self, n: int) -> Sensitivity:
        return _scalar_sensitivity(n)


# Centres of centred queries lie on this public grid (2^-10): with per-record values rounded to
# REAL_GRID (2^-20), every range endpoint (a product of two centred corners) is a grid point.
CENTRE_GRID = 2.0**-10


def _check_centre(c: float) -> None:
    if not (0.0 <= c <= 1.0) or c / CENTRE_GRID != round(c / CENTRE_GRID):
        raise ValueError(f"a centre must lie in [0, 1] on the grid {CENTRE_GRID:g}, not {c!r}")


def on_centre_grid(x: float) -> float:
    """``x`` rounded to :data:`CENTRE_GRID` and clipped to [0, 1] (a public centre)."""
    return min(max(round(float(x) / CENTRE_GRID) * CENTRE_GRID, 0.0), 1.0)


# A factor of a product: (column, None) is a numeric column's scaled value u in [0, 1],
# (column, code) the indicator 1{x = code}.
Factor = tuple[str, int | None]


@dataclass(frozen=True)
class CentredProduct:
    """``mean((f - 1/2) * (g - 1/2))`` of two factors ``f``, ``g`` (each in [0, 1]; see
    :data:`Factor`), centred at the midpoint of their public range.

    A second moment of the requirement measures (``dpql.plan.requirements``). It spans, with the
    first moments ``E f`` and ``E g``, the same linear space as the raw ``E fg`` (``E fg =
    E(f - 1/2)(g - 1/2) + (E f + E g)/2 - 1/4``), but its per-record value lies in
    [-1/4, 1/4] (two different factors) or [0, 1/4] (a square), not [0, 1]: replace-one
    sensitivity 1/(2n) or 1/(4n) instead of 1/n. In one Gaussian release of first and second
    moments that cuts the L2 sensitivity, hence every measure's noise sd, by about 1.6x for 5
    columns (sqrt(19) -> sqrt(7.75)). Factors are stored in sorted order, so equal products
    deduplicate. A square of an indicator is the constant 1/4 and two values of one column are
    linear in the first moments: neither is a query.
    """

    left: Factor
    right: Factor
    # the centres of (left, right); (1/2, 1/2) by default. Compile may re-centre a numeric
    # factor at a public value on CENTRE_GRID (``dpql.postprocess.centre``); an indicator keeps 1/2.
    centres: tuple[float, float] = (0.5, 0.5)
    # ``mean((f - c)(g - d) * 1{given})``: the rows where the product is defined (e.g. where
    # nullable columns are present, ``dpql.plan.requirements.present``); 0 elsewhere, inside
    # every range, so the sensitivity is unchanged
    given: Pred = TruePred()

    kind = "centred"

    def __post_init__(self) -> None:
        pairs = sorted(zip((self.left, self.right), self.centres, strict=True),
                       key=lambda p: _factor_key(p[0]))  # fmt: skip
        (a, ca), (b, cb) = pairs
        object.__setattr__(self, "left", a)
        object.__setattr__(self, "right", b)
        object.__setattr__(self, "centres", (float(ca), float(cb)))
        for f, c in pairs:
            _check_centre(c)
            if f[1] is not None and c != 0.5:
                raise ValueError("an indicator factor is centred at 1/2")
        if a == b and ca != cb:
            raise ValueError("a square has one centre")
        if a == b and a[1] is not None:
            raise ValueError("an indicator's centred square is the constant 1/4, not a query")
        if a[0] == b[0] and a[1] is not None and b[1] is not None:
            raise ValueError("two values of one column: linear in the first moments, not a query")
        if (a[1] is None) != (b[1] is None) and a[0] == b[0]:
            raise ValueError("a column cannot be both numeric and categorical")

    @property
    def square(self) -> bool:
        return self.left == self.right

    def cells(self, domain: Domain) -> int:
        return 1

    def sensitivity(self, n: int) -> Sensitivity:
        # (f - 1/2)(g - 1/2) ranges over [-1/4, 1/4]; a square (u - 1/2)^2 over [0, 1/4].
        # Centred at (c, d): a square over [0, max(c, 1 - c)^2]; a product, bilinear, between
        # its corners' values (0 among them: c, d in [0, 1]). A record outside the kept rows
        # contributes 0, inside every range.
        c, d = self.centres
        if self.square:
            width = max(c, 1 - c) ** 2
        else:
            corners = [(x - c) * (y - d) for x in (0.0, 1.0) for y in (0.0, 1.0)]
            width = max(corners) - min(corners)
        return Sensitivity(width / n, width / n)


def _factor_key(f: Factor) -> tuple[str, int]:
    return (f[0], -1 if f[1] is None else f[1])


@dataclass(frozen=True)
class ModelAccuracy:
    """Per-record score of a *fixed* linear model (the DP acceptance test of a model requirement).

    The design row ``z(x)`` lists, for each of ``features`` in order, the scaled value ``u`` of a
    numeric column or the one-hot indicators of every value of a categorical column (see
    :func:`dpql.ir.exact.design_matrix`). Scores are in [0, 1], so the sensitivity is that of a
    scalar query (1/n under replace-one):

    * ``logistic``: ``1{argmax_c (coef[c] . z + intercept[c]) == code(label)}`` -- accuracy;
      ``coef`` has one row per value of the categorical ``label``.
    * ``linear``: ``(u(label) - clip(coef[0] . z + intercept[0], 0, 1))**2`` -- squared error on
      the [0, 1] scale of a numeric ``label``.

    Added for ``dpql.postprocess.accept`` (additive to the IR); data engines may evaluate it through
    :mod:`dpql.ir.exact`. Without coefficients (``coef == ()``) it is a plan's stand-in for a
    *pilot* (``dpql.plan.requirements.pilot_query``), fitted at compile time; it has the same
    sensitivity but cannot be evaluated.
    """

    model: Literal["logistic", "linear"]
    features: tuple[str, ...]
    label: str
    coef: tuple[tuple[float, ...], ...]
    intercept: tuple[float, ...]
    # the score times ``1{given}``: the rows the model is defined on (its columns present,
    # ``dpql.plan.requirements.present``); 0 elsewhere, so the sensitivity is unchanged
    given: Pred = TruePred()

    kind = "model_accuracy"

    @property
    def fitted(self) -> bool:
        """False for a plan's pilot stand-in (no coefficients yet)."""
        return bool(self.coef)

    def cells(self, domain: Domain) -> int:
        return 1

    def sensitivity(self, n: int) -> Sensitivity:
        return _scalar_sensitivity(n)


Query = Marginal | Prefix | Halfspace | Count | Moment | CentredProduct | ModelAccuracy

QUERY_TYPES: tuple[type, ...] = get_args(Query)
"""Every query node class: each evaluator's query table has an entry for each."""

Handler = TypeVar("Handler")  # a function, or a record of functions (dpql.ir.exact.QueryRule)


def dispatch(table: Mapping[type, Handler], node: object) -> Handler:
    """The handler of ``node``'s class in an evaluator's dispatch table (a dict from IR node
    class to handler). Every evaluator (:mod:`dpql.ir.exact`, :mod:`dpql.data.query_sql`,
    :mod:`dpql.plan.describe`) keeps one table per node family, with an entry for every class of
    :data:`PRED_TYPES` or :data:`QUERY_TYPES`; a value of any other class raises TypeError."""
    try:
        return table[type(node)]
    except KeyError:
        raise TypeError(f"not an IR node this evaluator handles: {node!r}") from None


QUERY_KINDS: tuple[str, ...] = ("marginal", "prefix", "halfspace", "count", "moment")


def query_columns(q: Query) -> tuple[str, ...]:
    """All columns a query reads."""
    if isinstance(q, Marginal):
        return q.columns
    if isinstance(q, Prefix | Halfspace):
        return q.columns + ((q.by,) if q.by else ())
    if isinstance(q, Count):
        return pred_columns(q.predicate)
    if isinstance(q, ModelAccuracy):
        return tuple(dict.fromkeys((*q.features, q.label, *pred_columns(q.given))))
    if isinstance(q, CentredProduct):
        return tuple(dict.fromkeys((q.left[0], q.right[0], *pred_columns(q.given))))
    return q.columns + tuple(c for c in pred_columns(q.given) if c not in q.columns)


# Real-valued per-record contributions are rounded to this public grid before summing, so every
# measured sum is an integer number of grid steps and gets exact discrete Gaussian noise
# (docs/privacy.md). Each range endpoint (0, 1, -1/4, 1/4) is a grid point, so rounding to the
# nearest grid point keeps a record's value in its range: the sensitivities above are unchanged.
GRID_BITS = 20
REAL_GRID = 2.0**-GRID_BITS


def query_grid(q: Query) -> float:
    """The public grid of a query's per-record values: 1 for integer-valued queries (cells,
    counts, prefix and halfspace counts, a logistic model's accuracy, a moment with no columns),
    ``2^-GRID_BITS`` for real-valued ones (moments of numeric columns, centred products, a
    linear model's squared error). Engines sum ``round(v(x) / grid)``, an integer per record."""
    if isinstance(q, Moment) and q.columns:
        return REAL_GRID
    if isinstance(q, CentredProduct):
        return REAL_GRID
    if isinstance(q, ModelAccuracy) and q.model == "linear":
        return REAL_GRID
    return 1.0


def joint_l2_sensitivity(
    queries: Sequence[Query], n: int, scales: Sequence[float] | None = None
) -> float:
    """L2 sensitivity of the concatenated answers ``c_q * q(D)`` under replace-one at ``n``:
    ``sqrt(sum_q (c_q * Delta_2(q))^2)`` (sqrt(K)/n for K scalar queries at unit scale). Each
    query's change is bounded on its own, so the squared bounds add."""
    c = [1.0] * len(queries) if scales is None else list(scales)
    terms = (ci * q.sensitivity(n).l2 for q, ci in zip(queries, c, strict=True))
    return math.sqrt(math.fsum(t * t for t in terms))


# --------------------------------------------------------------------------------------------
# Requirements (downstream analyses; expanded into measurements by the planner)


@dataclass(frozen=True)
class Tolerance:
    """``within t`` (absolute) or a bound such as ``accuracy >= 0.8``."""

    within: float | None = None
    metric: str | None = None
    op: str | None = None
    bound: float | None = None


@dataclass(frozen=True)
class ModelRequirement:
    """``logistic(y ~ x1 + ...)`` or ``linear(y ~ ...)``."""

    model: Literal["logistic", "linear"]
    label: str
    features: tuple[str, ...]
    tolerance: Tolerance
    text: str = ""
    weight: float | None = None  # share of the post-processing budget (relative)


@dataclass(frozen=True)
class CorrRequirement:
    a: str
    b: str
    tolerance: Tolerance
    text: str = ""
    weight: float | None = None  # share of the post-processing budget (relative)
    # compile-time centres of (a, b) for the measured second moments (public, on CENTRE_GRID;
    # ``dpql.postprocess.centre``); None: the midpoints 1/2 (the plan's)
    centres: tuple[float, float] | None = None


@dataclass(frozen=True)
class MeanRequirement:
    column: str
    given: Pred
    tolerance: Tolerance
    text: str = ""
    weight: float | None = None  # share of the post-processing budget (relative)
    # compile-time centre of the column for the measured numerator E[(u - c) 1{given}]
    # (public, on CENTRE_GRID; ``dpql.postprocess.centre``); None: the plain E[u 1{given}]
    centre: float | None = None


@dataclass(frozen=True)
class CountRequirement:
    predicate: Pred
    tolerance: Tolerance
    text: str = ""
    weight: float | None = None  # share of the post-processing budget (relative)


Requirement = ModelRequirement | CorrRequirement | MeanRequirement | CountRequirement
