"""dpql evaluate on subsamples of the real Adult data (curator-side tests)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from dpql.domain import CategoricalColumn, Domain, NumericColumn, numeric_edges
from dpql.evaluate import (
    build_report,
    correlation_l1,
    default_label,
    describe_query,
    diversity,
    encode_table,
    marginal_tvd,
    tstr_scores,
)
from dpql.ir.queries import (
    And,
    CatIn,
    CorrRequirement,
    Count,
    Marginal,
    MeanRequirement,
    ModelRequirement,
    NumCmp,
    Prefix,
    Tolerance,
)

DATA = Path(__file__).resolve().parents[1] / "examples" / "adult"  # the UCI Adult splits
SPEC = DATA / "adult.release.yaml"


def adult_domain() -> Domain:
    """The spec's schema as a Domain (bins -> numeric_edges; explicit edges as given)."""
    cols = []
    for name, c in yaml.safe_load(SPEC.read_text())["schema"].items():
        if c["type"] == "categorical":
            cols.append(CategoricalColumn(name, tuple(str(v) for v in c["values"])))
            continue
        integer = bool(c.get("integer", False))
        edges = (
            tuple(float(e) for e in c["edges"])
            if "edges" in c
            else numeric_edges(c["min"], c["max"], integer, c["bins"])
        )
        cols.append(NumericColumn(name, float(c["min"]), float(c["max"]), integer, edges))
    return Domain(tuple(cols))


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """The test machine is shared: oversubscribed OpenMP makes gradient boosting crawl."""
    pytest.importorskip("sklearn.ensemble")  # load the OpenMP runtime first, so it is limited
    threadpoolctl = pytest.importorskip("threadpoolctl")
    with threadpoolctl.threadpool_limits(1):
        yield


@pytest.fixture(scope="module")
def domain() -> Domain:
    return adult_domain()


@pytest.fixture(scope="module")
def sample() -> pd.DataFrame:
    """4000 rows of adult_train.csv: two disjoint same-distribution halves of 2000."""
    df = pd.read_csv(DATA / "adult_train.csv.gz")
    return df.sample(4000, random_state=7).reset_index(drop=True)


def shuffle_columns(df: pd.DataFrame, seed: int) -> pd.DataFrame:
    """Each column permuted independently: same 1-way marginals, no dependence left."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({c: df[c].to_numpy()[rng.permutation(len(df))] for c in df.columns})


def test_shuffled_copy_has_larger_two_way_tvd(domain: Domain, sample: pd.DataFrame) -> None:
    real, other = sample.iloc[:2000], sample.iloc[2000:]
    shuffled = shuffle_columns(real, seed=1)
    enc = {k: encode_table(v, domain) for k, v in [("r", real), ("o", other), ("s", shuffled)]}
    pairs = [Marginal(p) for p in itertools.combinations(domain.names, 2)]
    ones = [Marginal((n,)) for n in domain.names]
    split, shuf = marginal_tvd(enc["r"], enc["o"], pairs), marginal_tvd(enc["r"], enc["s"], pairs)
    assert shuf.count == split.count == 105
    assert shuf.mean > 1.2 * split.mean
    # shuffling keeps every 1-way marginal exactly; an independent sample does not
    assert marginal_tvd(enc["r"], enc["s"], ones).max == pytest.approx(0.0, abs=1e-12)
    assert marginal_tvd(enc["r"], enc["o"], ones).max > 0
    assert correlation_l1(real, shuffled, domain) > 2 * correlation_l1(real, other, domain)


def test_tstr_detects_a_broken_label(domain: Domain, sample: pd.DataFrame) -> None:
    train, test = sample.iloc[:1000], sample.iloc[2000:]
    broken = train.assign(income=train["income"].sample(frac=1.0, random_state=3).to_numpy())
    for model in ("logistic", "hgb"):
        good = tstr_scores(train, test, "income", model, domain)
        bad = tstr_scores(broken, test, "income", model, domain)
        assert good.auc > 0.8 and good.accuracy > 0.75 and good.f1 > 0.4
        assert abs(bad.auc - 0.5) < 0.1
        assert good.f1 > bad.f1 + 0.2


def test_identical_synthetic_table_scores_zero_error(domain: Domain, sample: pd.DataFrame) -> None:
    real = sample.iloc[:600]
    holdout = sample.iloc[2000:2600]
    age, hours = domain["age"], domain["hours_per_week"]
    queries = [
        Marginal(("sex", "income")),
        Marginal(("age", "education", "income")),
        Count(And((NumCmp("age", ">=", age.scale(65)), NumCmp("hours_per_week", ">", 0.4)))),
        Prefix(("age", "hours_per_week"), (0.3, hours.scale(40)), "income"),
    ]
    feats = ("age", "education_num", "hours_per_week", "sex", "marital_status")
    reqs = [
        ModelRequirement("logistic", "income", feats, Tolerance(within=0.02), "logistic"),
        ModelRequirement("linear", "hours_per_week", ("age", "sex"), Tolerance(within=0.02)),
        CorrRequirement("age", "hours_per_week", Tolerance(within=0.05)),
        MeanRequirement("hours_per_week", CatIn("sex", frozenset({0})), Tolerance(within=1.0)),
    ]
    r = build_report(domain, real, real.copy(), queries, reqs, holdout_df=holdout)
    assert r.label == "income" and r.rows == {"real": 600, "synthetic": 600, "test": 600}
    assert [c.max for c in r.workload] == [0.0, 0.0, 0.0]
    assert all(c.error == 0.0 and c.passed for c in r.requirements)
    assert r.requirements[0].real == r.requirements[0].train_on_real > 0.7
    assert r.correlation_l1 == 0.0 and r.dimension_wise_probability.sse == 0.0
    for t in r.tstr:  # trained on the same rows with the same seed
        assert t.train_on_real == t.train_on_synthetic
    for d in r.dimension_wise_prediction:
        assert d.real == pytest.approx(d.synthetic)
    assert all(d.jsd == 0.0 and d.kl_mu == 0.0 for d in r.diversity)


def test_diversity_reproduces_paper_collapsed_race(domain: Domain) -> None:
    """DP-auto-GAN Tables 6/7 (digest test vector): race on all of Adult vs all-White."""
    race = pd.concat(
        [pd.read_csv(DATA / f, usecols=["race"]) for f in ("adult_train.csv.gz", "adult_test.csv.gz")]
    )
    only_race = Domain((domain["race"],))
    collapsed = pd.DataFrame({"race": ["White"] * 50})
    (d,) = diversity(encode_table(race, only_race), encode_table(collapsed, only_race))
    assert d.kl_mu == pytest.approx(0.4654, abs=1e-4)  # paper: .465
    assert d.jsd == pytest.approx(0.0531, abs=1e-4)  # paper: .053
    assert d.synthetic_categories == 1


def test_describe_query_and_default_label(domain: Domain) -> None:
    q = Count(
        And(
            (
                NumCmp("age", ">=", domain["age"].scale(65)),
                CatIn("sex", frozenset({0})),
                CatIn("race", frozenset({1, 2})),
            )
        )
    )
    assert describe_query(q, domain) == (
        'count(age >= 65 and sex == "Female" and race in {"Asian-Pac-Islander", "Black"})'
    )
    assert default_label(domain, []) == "income"  # last two-valued categorical
    req = ModelRequirement("logistic", "sex", ("age",), Tolerance(within=0.1))
    assert default_label(domain, [req]) == "sex"
