"""DP-SGD's private input: the out-of-core row store and the engines' encoded row streams."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpql.data.codec import Fill
from dpql.data.engines import DuckDBEngine, InMemoryEngine
from dpql.data.rows import RowStore, open_private_rows
from dpql.diagnostics import DiagnosticError
from dpql.domain import CategoricalColumn, Domain, EncodedTable, NumericColumn, numeric_edges

WIDE = tuple(f"v{i}" for i in range(300))  # codes past 255: two-byte codes in the store
DOMAIN = Domain(
    (
        NumericColumn("age", 17.0, 90.0, True, numeric_edges(17, 90, True, 8)),
        CategoricalColumn("c", ("a", "b", "c")),
        NumericColumn("x", -1.0, 1.0, False, (-1.0, -0.2, 0.5, 1.0)),
        CategoricalColumn("w", WIDE),
    )
)


def write_csv(path: Path, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "age": rng.integers(10, 100, n),  # some clipped
            "c": np.where(rng.random(n) < 0.05, "", rng.choice(["a", "b", "c"], n)),
            "x": rng.uniform(-1.2, 1.2, n),
            "w": rng.choice(np.asarray(WIDE), n),
        }
    )
    frame.to_csv(path, index=False)


def rows_of(t: EncodedTable) -> list[tuple]:
    """Rows as tuples (codes then scaled values), sorted: engines may order rows differently."""
    cols = [t.codes[c.name] for c in t.domain] + [t.scaled[c.name] for c in t.domain.numeric]
    return sorted(zip(*(c.tolist() for c in cols), strict=True))


def test_row_store_returns_the_codecs_rows_by_number(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    write_csv(path, 1_000, 0)
    missing = {"c": "drop"}
    reference = InMemoryEngine.from_file(path, DOMAIN, missing=missing).table  # type: ignore[arg-type]
    duck = DuckDBEngine(path, DOMAIN, missing=missing)  # type: ignore[arg-type]
    try:
        batches = list(duck.encoded_batches(rows=128))
    finally:
        duck.close()
    assert max(b.n for b in batches) == 128
    with RowStore(DOMAIN, iter(batches)) as store:
        assert store.n == reference.n < 1_000
        everything = store.take(np.arange(store.n))
        assert rows_of(everything) == rows_of(reference)  # bit-identical codes and scaled values
        assert everything.codes["w"].max() > 255 and everything.codes["w"].dtype == np.int32
        pick = np.array([5, 0, 5, store.n - 1])
        got = store.take(pick)
        for c in DOMAIN:
            np.testing.assert_array_equal(got.codes[c.name], everything.codes[c.name][pick])
        for c in DOMAIN.numeric:
            assert got.scaled[c.name].dtype == np.float64
            np.testing.assert_array_equal(got.scaled[c.name], everything.scaled[c.name][pick])
        where = store._dir
        assert oct(os.stat(where).st_mode)[-3:] == "700"
    assert not os.path.exists(where)


def test_open_private_rows_follows_the_engine_and_cleans_up(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    write_csv(path, 500, 1)
    missing = {"c": Fill("a")}
    with open_private_rows(path, DOMAIN, engine="memory", missing=missing) as table:
        assert isinstance(table, EncodedTable) and table.n == 500
        expected = rows_of(table)
    with open_private_rows(path, DOMAIN, engine="duckdb", missing=missing, batch_rows=64) as store:
        assert isinstance(store, RowStore) and store.n == 500
        assert rows_of(store.take(np.arange(500))) == expected
        where = store._dir
    assert not os.path.exists(where)
    with pytest.raises(DiagnosticError) as err:  # the measurements' diagnostics
        with open_private_rows(path, DOMAIN, engine="duckdb", max_rows=499):
            pass
    assert err.value.codes == ["E411"]


@pytest.mark.e2e
def test_gan_compile_trains_on_the_row_store_of_an_out_of_core_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dpql.cli import main
    from dpql.synth.gan import train as gan

    example = Path(__file__).resolve().parents[1] / "examples"
    pd.read_csv(example / "adult" / "adult_train.csv.gz").head(2000).to_csv(
        tmp_path / "train.csv", index=False
    )
    text = (example / "adult-gan" / "adult-gan.release.yaml").read_text()
    text = text.replace("../adult/adult_train.csv.gz", "train.csv\n  engine: duckdb")
    text = text.replace("rows: 32561", "rows: 2000")
    for option, value in [("ae_steps", 1000), ("critic_steps", 1000), ("finetune_steps", 2000)]:
        assert f"{option}: {value}" in text
        text = text.replace(f"{option}: {value}", f"{option}: 10")
    (tmp_path / "gan.yaml").write_text(text)
    seen: list[object] = []
    train = gan.train_gan

    def spy(rows, *args, **kwargs):
        seen.append(rows)
        return train(rows, *args, **kwargs)

    monkeypatch.setattr(gan, "train_gan", spy)
    assert main(["compile", str(tmp_path / "gan.yaml"), "--seed", "0", "--quiet"]) == 0
    (store,) = seen
    assert isinstance(store, RowStore) and store.n == 2000 and store._rows is None  # closed
    assert not os.path.exists(store._dir)
    out = pd.read_csv(tmp_path / "out" / "adult_gan_synthetic.csv")
    assert len(out) == 2000 and set(out["sex"]) <= {"Female", "Male"}
