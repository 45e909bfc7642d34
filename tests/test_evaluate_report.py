"""dpql evaluate on a tiny hand-made table: the JSON numbers are recomputed here by hand."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpql.domain import CategoricalColumn, Domain, NumericColumn, numeric_edges
from dpql.evaluate import MissingExtraError, build_report
from dpql.ir.queries import (
    CatIn,
    CorrRequirement,
    Count,
    CountRequirement,
    Marginal,
    MeanRequirement,
    Moment,
    NumCmp,
    Prefix,
    Tolerance,
)

DOMAIN = Domain(
    (
        CategoricalColumn("a", ("x", "y")),
        CategoricalColumn("b", ("p", "q", "r")),
        NumericColumn("n", 0.0, 10.0, True, numeric_edges(0, 10, True, 2)),  # bins [0,5.5) [5.5,11)
    )
)
REAL = pd.DataFrame({"a": list("xxxyyy"), "b": list("pqrpqr"), "n": [0, 2, 4, 6, 8, 10]})
SYNTH = pd.DataFrame({"a": list("xxyy"), "b": list("ppqq"), "n": [0, 2, 2, 10]})
QUERIES = [
    Marginal(("a",)),
    Marginal(("b",)),
    Marginal(("a", "b")),
    Marginal(("n",)),
    Count(NumCmp("n", ">", 0.4)),
    Moment(("n",)),
    Prefix(("n",), (0.3,), "a"),
]
REQUIREMENTS = [
    CorrRequirement("a", "n", Tolerance(within=0.05), "corr(a, n) within 0.05"),
    MeanRequirement("n", CatIn("a", frozenset({0})), Tolerance(within=0.5), "mean(n | a == x)"),
    CountRequirement(CatIn("b", frozenset({0})), Tolerance(within=0.2), "count(b == p)"),
]


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.classes: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "img":
            self.images.append(a["src"] or "")
        if a.get("class"):
            self.classes.append(a["class"] or "")

    def handle_data(self, data: str) -> None:
        self.text.append(data)


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """The test machine is shared: oversubscribed OpenMP makes gradient boosting crawl."""
    pytest.importorskip("sklearn.ensemble")  # load the OpenMP runtime first, so it is limited
    threadpoolctl = pytest.importorskip("threadpoolctl")
    with threadpoolctl.threadpool_limits(1):
        yield


@pytest.fixture(scope="module")
def written(one_thread: None, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("report")
    calls: list[tuple[str, int, int]] = []
    build_report(
        DOMAIN, REAL, SYNTH, QUERIES, REQUIREMENTS, holdout_df=REAL, output_dir=out,
        progress=lambda *c: calls.append(c),
    )  # fmt: skip
    steps = {s for s, _, _ in calls}
    assert {"workload", "requirements", "dimension-wise prediction", "plots"} <= steps
    for s in steps:  # each step counts up to its total
        mine = [(i, t) for name, i, t in calls if name == s]
        assert [i for i, _ in mine] == sorted(i for i, _ in mine) and mine[-1][0] == mine[-1][1]
    return out, json.loads((out / "summary.json").read_text())


def test_json_flags_private_data(written: tuple[Path, dict]) -> None:
    s = written[1]
    assert s["private"] is True
    assert "PRIVATE" in s["warning"] and "must not be published" in s["warning"]


def test_workload_numbers_by_hand(written: tuple[Path, dict]) -> None:
    s = written[1]["workload"]
    # TVD: a identical (0); b (1/3,1/3,1/3) vs (1/2,1/2,0) -> 1/3; (a, b) six cells of 1/6 vs
    # two of 1/2 -> 2/3; n bins (1/2,1/2) vs (3/4,1/4) -> 1/4
    tvd = [0.0, 1 / 3, 2 / 3, 1 / 4]
    got = {c["kind"]: c for c in s["classes"]}
    assert got["marginal"]["count"] == 4
    assert got["marginal"]["mean"] == pytest.approx(np.mean(tvd))
    assert got["marginal"]["max"] == pytest.approx(2 / 3)
    assert got["count"]["max"] == pytest.approx(0.5 - 0.25)  # n > 4: 3/6 vs 1/4
    assert got["moment"]["max"] == pytest.approx(0.5 - 0.35)  # mean n/10: 5/10 vs 3.5/10
    # n <= 3 by a: real (2/6, 0), synthetic (2/4, 1/4)
    assert got["prefix"]["max"] == pytest.approx(0.25)
    errors = [q["error"] for q in s["queries"]]
    assert errors[:4] == pytest.approx(tvd)
    assert s["worst"][0]["description"] == "marginal(a, b)"
    assert s["queries"][4]["description"] == "count(n > 4)"


def test_requirements_by_hand(written: tuple[Path, dict]) -> None:
    corr, mean, count = written[1]["requirements"]
    a_real, a_syn = [0, 0, 0, 1, 1, 1], [0, 0, 1, 1]
    want_real = np.corrcoef(a_real, REAL["n"])[0, 1]
    want_syn = np.corrcoef(a_syn, SYNTH["n"])[0, 1]
    assert (corr["real"], corr["synthetic"]) == pytest.approx((want_real, want_syn))
    assert corr["passed"] is False  # 0.878 vs 0.651
    assert (mean["real"], mean["synthetic"], mean["error"]) == pytest.approx((2.0, 1.0, 1.0))
    assert mean["passed"] is False
    assert (count["real"], count["synthetic"]) == pytest.approx((1 / 3, 1 / 2))
    assert count["passed"] is True


def test_distribution_metrics_by_hand(written: tuple[Path, dict]) -> None:
    s = written[1]
    # correlations of the numeric and two-valued columns; b's three codes have no order
    assert s["correlation"]["columns"] == ["a", "n"]
    real = np.corrcoef([[0, 0, 0, 1, 1, 1], REAL["n"]])
    syn = np.corrcoef([[0, 0, 1, 1], SYNTH["n"]])
    assert s["correlation"]["l1"] == pytest.approx(np.abs(real - syn).sum())

    # dimension-wise probability: only b differs, (1/3 - 1/2)^2 * 2 + (1/3)^2
    assert s["dimension_wise_probability"]["sse"] == pytest.approx(1 / 6)

    div = {d["column"]: d for d in s["diversity"]["columns"]}
    assert div["a"]["jsd"] == pytest.approx(0.0) and div["a"]["kl_mu"] == pytest.approx(0.0)
    third, m = 1 / 3, (5 / 12, 5 / 12, 1 / 6)
    jsd = 0.5 * (2 * third * math.log(third / m[0]) + third * math.log(third / m[2]))
    jsd += 0.5 * (2 * 0.5 * math.log(0.5 / m[0]))
    assert div["b"]["jsd"] == pytest.approx(jsd)
    mu = math.exp(-1 / (1 - third))
    kl = sum((third + mu) * math.log((third + mu) / (q + mu)) for q in (0.5, 0.5, 0.0))
    assert div["b"]["kl_mu"] == pytest.approx(kl)
    assert div["b"]["synthetic_categories"] == 2

    hist = {h["column"]: h for h in s["histograms"]}
    assert hist["n"]["real"] == pytest.approx([0.5, 0.5])
    assert hist["n"]["synthetic"] == pytest.approx([0.75, 0.25])


def test_html_parses_and_links_real_plots(written: tuple[Path, dict]) -> None:
    out, summary = written
    page = _Page()
    page.feed((out / "index.html").read_text(encoding="utf-8"))
    assert "private-warning" in page.classes
    assert any("must not be published" in t for t in page.text)
    assert len(page.images) == len(DOMAIN) + 2  # histograms, correlations, dimension-wise
    assert sorted(page.images) == sorted(summary["figures"].values())
    imread = pytest.importorskip("matplotlib.image").imread
    for src in page.images:
        assert not Path(src).is_absolute() and (out / src).is_file()
        pixels = imread(out / src)
        assert pixels.shape[0] >= 200 and pixels.shape[1] >= 300
        assert pixels[..., :3].var() > 1e-3  # not blank


def test_unknown_category_follows_the_missing_rule() -> None:
    bad = SYNTH.assign(b=["p", "p", "q", "zzz"])  # no rule, not nullable: the row is dropped
    dropped = build_report(DOMAIN, REAL, bad, QUERIES, [])
    assert dropped.to_json() == build_report(DOMAIN, REAL, SYNTH.head(3), QUERIES, []).to_json()


def test_missing_extra_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "sklearn", None)  # makes `import sklearn` fail
    with pytest.raises(MissingExtraError, match=r"pip install scikit-learn matplotlib"):
        build_report(DOMAIN, REAL, SYNTH, QUERIES, [])
