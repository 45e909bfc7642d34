"""Requirements -> measures: the moment and counting queries a declared requirement depends on.

Pure planning code: it reads the public :class:`~dpql.domain.Domain` only, never data.

Every requirement becomes averages of products of at most two *factors*, each in [0, 1]:

* a numeric column enters as its scaled value ``u = (x - lo) / (hi - lo)`` (public bounds);
* a categorical column enters as indicators ``1{x = v}``. For a model's features and a logistic
  label, every value but the first (the reference level) gets one: the reference indicator is
  ``1 - sum(others)``, so its moments are linear in the measured ones and measuring it would only
  spend budget. ``corr`` and ``mean`` accept a *binary* categorical column as the indicator of
  its second value.

A first moment ``E f`` (or a conditional one, ``E[f 1{P}]``) is a
:class:`~dpql.ir.queries.Moment` (indicators folded into ``given``) or a
:class:`~dpql.ir.queries.Count`, with values in [0, 1] (sensitivity 1/n). A second moment is
measured *centred* at the midpoint of the factors' public range,
``E(f - 1/2)(g - 1/2)`` (:class:`~dpql.ir.queries.CentredProduct`): with the first moments it
carries exactly what ``E fg`` carries, but its values lie in [-1/4, 1/4] (a square's in
[0, 1/4]), so it has sensitivity 1/(2n) (1/(4n)) and one release of first and second moments
needs far less noise than the raw ``E fg`` of Wang et al. 2023, §3 (its (d + 3) d / 2 first
and second moments of d columns, each of range 1, have ``Delta_2 <= sqrt((d + 3) d / 2) / n``).
Products that are constant (an indicator's square is 1/4) or linear in the first moments (two
values of one column) are not measured.

* ``corr(a, b)``: ``E a, E b, E(a-1/2)^2, E(a-1/2)(b-1/2), E(b-1/2)^2`` (Wang et al. 2023,
  §3, the moments behind the correlation matrix).
* ``mean(a | P)``: ``E[u_a 1{P}]`` and ``E[1{P}]``.
* ``count(P)``: ``E[1{P}]`` (the requirement's value is a *fraction* of rows).
* ``logistic(y ~ x...) within t`` (its test compares accuracies): one query, its *pilot*
  (:func:`pilot_query`): the accuracy on the real table of the model that compile fits on the
  synthetic table it post-processes (``dpql.postprocess.run.with_pilots``). The test's statistic
  is that accuracy gap, which the moments below do not pin, so they are not measured for it:
  they would spend budget and steer the projection only weakly.
* every other ``logistic(y ~ x...)`` / ``linear(y ~ x...)``: first and (centred) second moments
  of the features and the label (label indicators / scaled label). Zhou et al. 2024, §3.1
  (Theorem 3.1), bound a linear model's excess risk by how far the synthetic table moves the
  statistics its loss's polynomial approximation (§2.3) reads. Here: the logistic loss is
  ``-yz/2 + h(z)`` with ``h`` even, and the squared loss is ``1 - 2yz + z^2``, so up to a
  degree-2 approximation of ``h`` the empirical risk of every linear model is a linear function
  of exactly these moments.

Missing values (``docs/missing.md``). Over ``missing: keep`` columns a requirement is defined on
the rows where its columns are present (:func:`present`, ``na.rm``): every moment is summed over
those rows only (still divided by the public n) and their count joins the measures, so the
value is a ratio estimator (:func:`per_present_row`; a mean conditions on its column being
present). Under ``missing: drop`` the answers are averages over the kept rows
(``dpql.population``) and each requirement carries their count, ``count(true)``, the same way
(:func:`normaliser`).

A requirement's value from (noisy) answers, its delta-method sd and the planner's prediction of
that sd are in :mod:`dpql.plan.estimates`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpql.diagnostics import Diagnostic, DiagnosticError
from dpql.domain import CategoricalColumn, Domain, NumericColumn
from dpql.ir.queries import (
    And,
    CatIn,
    CentredProduct,
    CorrRequirement,
    Count,
    CountRequirement,
    Factor,
    MeanRequirement,
    ModelAccuracy,
    ModelRequirement,
    Moment,
    Not,
    Pred,
    Query,
    Requirement,
    TruePred,
    joint_l2_sensitivity,
)
from dpql.privacy.budget import split_rho
from dpql.privacy.mechanisms import gaussian_sigma

_TRUE = TruePred()


@dataclass(frozen=True)
class Release:
    """One Gaussian release of the post-processing measurements: the positions of its queries
    in :attr:`RequirementMeasures.queries` and its exact fraction of the measurement budget
    (``dpql.privacy.budget.split_rho`` turns the fractions into rho that never sums above)."""

    cells: tuple[int, ...]
    share: Fraction


def joint_release(k: int) -> Release:
    """One release of all ``k`` measures with the whole budget (the paper's setting)."""
    return Release(tuple(range(k)), Fraction(1))


def release_rhos(releases: Sequence[Release], rho: float) -> list[float]:
    """The rho of each release when they spend ``rho`` in all: exact shares through
    ``split_rho``, so the parts never sum above ``rho``. The planner, the measurement and the
    predicted sigmas all use this one split."""
    return list(split_rho(rho, {str(i): r.share for i, r in enumerate(releases)}).values())


@dataclass(frozen=True)
class RequirementMeasures:
    """Deduplicated measures of a list of requirements.

    ``queries`` are scalar queries (first moments and counts of sensitivity 1/n, centred
    products 1/(2n), centred squares 1/(4n); together the L2 sensitivity is the root sum of
    squares, :func:`~dpql.ir.queries.joint_l2_sensitivity`); ``index[r]`` lists the positions of
    requirement ``r``'s queries in ``queries``; ``releases`` says how they are measured
    (spec/language.md sec. 5.3): :func:`expand_requirements` gives one joint release of all of
    them, or, when the requirements carry weights, one release per requirement with budget
    share ``w_r / sum(w)``; the planner then sets the releases it chose
    (:mod:`dpql.plan.split`: one per requirement, each at the rho its test needs).
    """

    queries: tuple[Query, ...]
    index: tuple[tuple[int, ...], ...]
    releases: tuple[Release, ...] = ()

    def release_sigmas(self, n: int, rho: float) -> list[float]:
        """Noise sd of each release (``releases``, else one joint release) at equal noise when
        the releases spend ``rho`` (zCDP) in all: release ``g`` at ``rho_g = share_g rho`` has
        ``sigma_g = Delta_g / sqrt(2 rho_g)``, with ``Delta_g`` the L2 sensitivity of its
        queries (replace-one); ``inf`` for a release of no rho or no query."""
        releases = self.releases or (joint_release(len(self.queries)),)
        return [
            gaussian_sigma(joint_l2_sensitivity([self.queries[i] for i in rel.cells], n), rho_g)
            if rho_g > 0 and rel.cells else math.inf
            for rel, rho_g in zip(releases, release_rhos(releases, rho), strict=True)
        ]  # fmt: skip

    def cell_sigmas(self, n: int, rho: float) -> np.ndarray:
        """Noise sd of each measure when the releases spend ``rho`` (zCDP) in all
        (:meth:`release_sigmas`). A measure in several releases is their inverse-variance
        average: ``(sum_g sigma_g^-2)^(-1/2)``.
        """
        precision = np.zeros(len(self.queries))
        releases = self.releases or (joint_release(len(self.queries)),)
        for rel, sigma in zip(releases, self.release_sigmas(n, rho), strict=True):
            precision[list(rel.cells)] += sigma**-2
        with np.errstate(divide="ignore"):
            return 1.0 / np.sqrt(precision)

    def answer_map(self, answers: Sequence[float] | np.ndarray) -> dict[Query, float]:
        """Pair answers (in ``queries`` order) with their queries, for
        :func:`dpql.plan.estimates.requirement_value`."""
        flat = np.asarray(answers, dtype=np.float64).ravel()
        if flat.shape[0] != len(self.queries):
            raise ValueError(f"expected {len(self.queries)} answers, got {flat.shape[0]}")
        return dict(zip(self.queries, flat.tolist(), strict=True))


def _error(code: str, message: str, hint: str, req: Requirement | None = None) -> DiagnosticError:
    where = f"requirement '{req.text}': " if req is not None and req.text else ""
    return DiagnosticError([Diagnostic(code, where + message, hint=hint)])


def _column(domain: Domain, name: str, req: Requirement) -> NumericColumn | CategoricalColumn:
    if name not in domain:
        raise _error("E501", f"unknown column '{name}'", "use a column of the schema", req)
    return domain[name]


def present(domain: Domain, columns: Sequence[str]) -> Pred:
    """``1{every nullable column of columns holds a value}``: the rows a statistic over these
    columns is defined on (``na.rm``). A ``missing: keep`` cell has no value (its scaled value
    ``NULL_SCALED`` is a placeholder), so ``mean``, ``corr`` and the models average over the
    rows where their columns are present: each is a ratio of sums over those rows to their
    count, every sum at the public n. True when no column is nullable."""
    items: list[Pred] = []
    for c in dict.fromkeys(columns):
        col = domain[c] if c in domain else None
        if col is not None and col.nullable:
            items.append(Not(CatIn(c, frozenset({col.null_code}))))
    return _conj(items)


def requirement_columns(req: Requirement) -> tuple[str, ...]:
    """The columns whose values a requirement averages (its presence predicate's columns)."""
    if isinstance(req, CorrRequirement):
        return (req.a, req.b)
    if isinstance(req, MeanRequirement):
        return (req.column,)
    if isinstance(req, ModelRequirement):
        return (*req.features, req.label)
    return ()


def _scalar_factor(domain: Domain, name: str, req: Requirement) -> Factor:
    """A column as one [0, 1] factor: numeric scaled, or a binary categorical's 2nd value."""
    col = _column(domain, name, req)
    if isinstance(col, NumericColumn):
        return (name, None)
    if len(col.values) == 2:  # a missing: keep column's null state is not a value
        return (name, 1)
    raise _error(
        "E501",
        f"column '{name}' has {len(col.values)} categories; corr and mean need a numeric or "
        "binary column",
        f'use count({name} == "...") per category instead',
        req,
    )


def _model_factors(req: ModelRequirement, domain: Domain) -> list[Factor]:
    out: list[Factor] = []
    for f in req.features:
        col = _column(domain, f, req)
        if isinstance(col, NumericColumn):
            out.append((f, None))
        else:
            out.extend((f, code) for code in range(1, len(col.values)))  # null: never present
    label = _column(domain, req.label, req)
    if req.model == "logistic":
        if not isinstance(label, CategoricalColumn):
            raise _error(
                "E501",
                f"logistic regression needs a categorical label, '{req.label}' is numeric",
                "use linear(...) for a numeric label",
                req,
            )
        out.extend((req.label, code) for code in range(1, len(label.values)))
    else:
        if not isinstance(label, NumericColumn):
            raise _error(
                "E501",
                f"linear regression needs a numeric label, '{req.label}' is categorical",
                "use logistic(...) for a categorical label",
                req,
            )
        out.append((req.label, None))
    return out


def _conj(items: list[Pred]) -> Pred:
    items = [p for p in items if not isinstance(p, TruePred)]
    if not items:
        return TruePred()
    return items[0] if len(items) == 1 else And(tuple(items))


def product_query(factors: Sequence[Factor], given: Pred = _TRUE) -> Query | float:
    """The query ``E[prod(factors) * 1{given}]`` in canonical form, or the constant 0.0 / 1.0.

    Canonical: numeric columns sorted, indicators folded into ``given`` sorted by column, so equal
    products from different requirements deduplicate.
    """
    nums = tuple(sorted(c for c, code in factors if code is None))
    codes: dict[str, int] = {}
    for c, code in factors:
        if code is not None:
            if codes.setdefault(c, code) != code:
                return 0.0  # one column cannot take two values
    inds: list[Pred] = [CatIn(c, frozenset({codes[c]})) for c in sorted(codes)]
    pred = _conj([*inds, given])
    if nums:
        return Moment(nums, given=pred)
    return 1.0 if isinstance(pred, TruePred) else Count(pred)


def centred_product(
    f: Factor, g: Factor, centres: tuple[float, float] = (0.5, 0.5), given: Pred = _TRUE
) -> Query | float:
    """The centred second moment ``E(f - c)(g - d) 1{given}`` (``centres``, 1/2 by default),
    or the constant 1/4 of an indicator's square (per row where ``given`` holds). Two values
    of one categorical column are linear in the first moments (``1/4 - (E f + E g)/2``):
    callers leave them out (the IR refuses them)."""
    if f == g and f[1] is not None:
        return 0.25  # per row where ``given`` holds: a part of a ratio (``per_present_row``)
    return CentredProduct(f, g, centres, given)


def _one_column_indicators(f: Factor, g: Factor) -> bool:
    return f[0] == g[0] and f != g and f[1] is not None and g[1] is not None


def _moment_queries(
    factors: Sequence[Factor], given: Pred = _TRUE, count: Count | None = None
) -> list[Query | float]:
    """First moments of every factor and the centred products of every pair ``i <= j``
    (squares included; pairs of one column's indicators are linear in the first moments), on
    the rows where ``given`` holds, with their ``count`` (:func:`normaliser`) last."""
    out: list[Query | float] = [product_query([f], given) for f in factors]
    for i, fi in enumerate(factors):
        for fj in factors[i:]:
            if not _one_column_indicators(fi, fj):
                out.append(centred_product(fi, fj, given=given))
    if count is not None:
        out.append(count)
    return out


def _corr_centres(req: CorrRequirement, domain: Domain) -> tuple[float, float]:
    """The centres of (a, b): the requirement's compile-time ones for numeric columns, else 1/2
    (a binary column's indicator is always centred at 1/2)."""
    a, b = _scalar_factor(domain, req.a, req), _scalar_factor(domain, req.b, req)
    given = req.centres or (0.5, 0.5)
    return tuple(c if f[1] is None else 0.5 for f, c in zip((a, b), given, strict=True))  # type: ignore[return-value]


def _corr_parts(req: CorrRequirement, domain: Domain) -> list[Query | float]:
    a, b = _scalar_factor(domain, req.a, req), _scalar_factor(domain, req.b, req)
    ca, cb = _corr_centres(req, domain)
    centre = {a: ca, b: cb}
    q = present(domain, (req.a, req.b))
    pairs = [
        centred_product(f, g, (centre[f], centre[g]), q) for f, g in ((a, a), (a, b), (b, b))
    ]
    out = [product_query([a], q), product_query([b], q), *pairs]
    count = normaliser(req, domain)
    return out if count is None else [*out, count]


def per_present_row(
    parts: Sequence[Query | float],
    fn: Callable[[Sequence[float]], float],
    count: Count | None,
) -> Callable[[Sequence[float]], float]:
    """``fn`` of the parts averaged over the rows a statistic is defined on: with ``count``
    (:func:`normaliser`, the last part), every measured part ``E[f 1{Q}]`` is divided by it (a
    ratio estimator; constants are already per such row); without, ``fn`` itself. NaN where
    the count is not positive."""
    if count is None:
        return fn
    measured = [i for i, p in enumerate(parts[:-1]) if not isinstance(p, float)]

    def ratio(m: Sequence[float]) -> float:
        count = float(m[-1])
        if not count > 0:
            return math.nan
        per_row = [float(x) for x in m[:-1]]
        for i in measured:
            per_row[i] /= count
        return fn(per_row)

    return ratio


def _mean_given(req: MeanRequirement, domain: Domain) -> Pred:
    """A mean's condition and its column present (:func:`present`)."""
    return _conj([req.given, present(domain, (req.column,))])


def _mean_centre(req: MeanRequirement, domain: Domain) -> float | None:
    """The compile-time centre of a numeric column's mean; None otherwise."""
    return req.centre if _scalar_factor(domain, req.column, req)[1] is None else None


def _mean_parts(req: MeanRequirement, domain: Domain) -> list[Query | float]:
    f = _scalar_factor(domain, req.column, req)
    c = _mean_centre(req, domain)
    given = _mean_given(req, domain)
    num = product_query([f], given)
    if c is not None and isinstance(num, Moment):
        num = Moment(num.columns, num.given, centre=c)
    count = product_query([], given)
    if isinstance(count, float) and domain.complete_in:
        count = Count(_TRUE)  # the kept rows' count, not the estimate of their share
    return [num, count]


def _count_parts(req: CountRequirement, domain: Domain) -> list[Query | float]:
    """``E 1{P}``, and under ``missing: drop`` the kept rows' count it is a fraction of."""
    count = normaliser(req, domain)
    return [product_query([], req.predicate), *([count] if count is not None else [])]


def piloted(req: Requirement) -> bool:
    """Whether a requirement is measured by its pilot alone (module docstring): a logistic
    regression whose test compares accuracies within a tolerance."""
    from dpql.plan.acceptance import tested_metric  # acceptance imports this module

    return (
        isinstance(req, ModelRequirement)
        and req.model == "logistic"
        and req.tolerance.within is not None
        and tested_metric(req) == "accuracy"
    )


def pilot_query(req: ModelRequirement, domain: Domain) -> ModelAccuracy:
    """The plan-time stand-in of a requirement's pilot: its model not yet fitted (no
    coefficients; :attr:`~dpql.ir.queries.ModelAccuracy.fitted` is False). Compile replaces it by
    the model fitted on the synthetic table (public), a query of the same sensitivity (1/n), so
    the release keeps the plan's L2 sensitivity and rho."""
    return ModelAccuracy(req.model, req.features, req.label, (), (), present_of(req, domain))


def present_of(req: Requirement, domain: Domain) -> Pred:
    """The rows a requirement's statistic is defined on: its columns present (:func:`present`)."""
    return present(domain, requirement_columns(req))


def normaliser(req: Requirement, domain: Domain) -> Count | None:
    """The count a requirement's averages are ratios to: of the rows where its columns are
    present (``missing: keep``), else, when rows are dropped (``missing: drop``), of the kept
    rows (``count(true)``, so the value does not rest on the release's estimate of their
    share, ``dpql.population``); None when its averages are over all n rows."""
    q = present_of(req, domain)
    if not isinstance(q, TruePred):
        return Count(q)
    return Count(_TRUE) if domain.complete_in else None


def requirement_queries(req: Requirement, domain: Domain) -> tuple[Query, ...]:
    """The measured queries of one requirement (constants removed, duplicates kept once)."""
    if piloted(req):
        assert isinstance(req, ModelRequirement)
        _model_factors(req, domain)  # the same checks (E501) as a measured model
        parts: list[Query | float] = [pilot_query(req, domain)]
    elif isinstance(req, CorrRequirement):
        parts = _corr_parts(req, domain)
    elif isinstance(req, MeanRequirement):
        parts = _mean_parts(req, domain)
    elif isinstance(req, CountRequirement):
        parts = _count_parts(req, domain)
    else:
        factors = _model_factors(req, domain)
        parts = _moment_queries(factors, present_of(req, domain), normaliser(req, domain))
    if domain.complete_in:
        # the count of the complete cases: the release's estimate of their share when no
        # marginal was measured before (an external table; dpql.population)
        parts.append(Count(_TRUE))
    return tuple(dict.fromkeys(p for p in parts if not isinstance(p, float)))


def expand_requirements(reqs: Sequence[Requirement], domain: Domain) -> RequirementMeasures:
    """Deduplicated measures of all requirements, with each requirement's indices into them."""
    pos: dict[Query, int] = {}
    index = []
    for r in reqs:
        index.append(tuple(pos.setdefault(q, len(pos)) for q in requirement_queries(r, domain)))
    weights = [r.weight for r in reqs]
    if any(w is None for w in weights):  # the resolver allows all or none
        releases = (joint_release(len(pos)),)
    else:
        # A requirement with no measured query (all parts constant) spends nothing.
        used = [(c, Fraction(w)) for c, w in zip(index, weights, strict=True) if c and w]
        total = sum((w for _, w in used), Fraction(0))
        releases = tuple(Release(c, w / total) for c, w in used)
    return RequirementMeasures(tuple(pos), tuple(index), releases)


# ---------------------------------------------------------------------------------------------
# Values from answers (estimates and their sds: dpql.plan.estimates)



def lookup_part(answers: Mapping[Query, float], part: Query | float) -> float:
    return part if isinstance(part, float) else float(answers[part])


VARIANCE_RTOL = 1e-9  # variance below this fraction of E x^2: a constant column (rounding)


def _corr(m: Sequence[float], centres: tuple[float, float] = (0.5, 0.5)) -> float:
    """Pearson correlation from ``E a, E b`` and the centred ``E a'a', E a'b', E b'b'``
    (``a' = a - c``, ``b' = b - d`` for ``centres`` (c, d)): ``Var a = E a'^2 - (E a')^2``,
    ``Cov = E a'b' - E a' E b'``."""
    ma, mb, caa, cab, cbb = m
    da, db = ma - centres[0], mb - centres[1]
    va, vb = caa - da * da, cbb - db * db
    if not (va > VARIANCE_RTOL * abs(caa) and vb > VARIANCE_RTOL * abs(cbb)):
        return math.nan  # E a'^2 - (E a')^2 of a constant column is rounding error, not variance
    return (cab - da * db) / math.sqrt(va * vb)


def _ratio(m: Sequence[float]) -> float:
    return m[0] / m[1] if m[1] > 0 else math.nan


def denominators(req: Requirement, domain: Domain) -> list[Callable[[Sequence[float]], float]]:
    """What a corr / mean / count requirement's value divides by, each a function of the
    parts of :func:`parts_and_fn` (in its order) that is positive where the value is defined:
    a corr's two variances per present row, and the count every average is a ratio to (a
    mean's condition, :func:`normaliser`). The value is nonlinear in these: the delta method
    (``dpql.plan.estimates.value_sd``) holds only while their noise is small against them
    (``dpql.postprocess.allocation``)."""
    out: list[Callable[[Sequence[float]], float]] = []
    if isinstance(req, CorrRequirement):
        ca, cb = _corr_centres(req, domain)
        parts, count = _corr_parts(req, domain), normaliser(req, domain)
        out += [
            per_present_row(parts, lambda m: m[2] - (m[0] - ca) ** 2, count),
            per_present_row(parts, lambda m: m[4] - (m[1] - cb) ** 2, count),
        ]
        if count is not None:
            out.append(lambda m: m[-1])
    elif isinstance(req, MeanRequirement):
        out.append(lambda m: m[1])
    elif isinstance(req, CountRequirement) and normaliser(req, domain) is not None:
        out.append(lambda m: m[-1])
    return out


def parts_and_fn(
    req: Requirement, domain: Domain
) -> tuple[list[Query | float], Callable[[Sequence[float]], float], float]:
    """(parts, value on the [0, 1] scale, factor to original units)."""
    if isinstance(req, CorrRequirement):
        centres = _corr_centres(req, domain)
        parts = _corr_parts(req, domain)
        count = normaliser(req, domain)
        return parts, per_present_row(parts, lambda m: _corr(m, centres), count), 1.0
    if isinstance(req, MeanRequirement):
        col = domain[req.column]
        span = col.span if isinstance(col, NumericColumn) else 1.0
        c = _mean_centre(req, domain)
        if c is None:
            return _mean_parts(req, domain), _ratio, span
        # E[(u - c) 1{P}] / E[1{P}] + c: the ratio of the centred numerator, shifted back
        return _mean_parts(req, domain), lambda m: _ratio(m) + c, span
    if isinstance(req, CountRequirement):
        parts = _count_parts(req, domain)
        return parts, per_present_row(parts, lambda m: m[0], normaliser(req, domain)), 1.0
    raise TypeError("model requirements have no moment value; see dpql.postprocess.accept")
