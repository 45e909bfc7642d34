"""The public encoding (dpql.data.codec): correct codes and scaling; total over cells (no cell is an
error: each follows its column's rule), errors only for the spec's rules and the schema."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from dpql.data.codec import Fill, decode, decode_values, encode_frame, inspect_frame
from dpql.diagnostics import DiagnosticError
from dpql.domain import CategoricalColumn, Domain, NumericColumn, numeric_edges

AGE = NumericColumn("age", 17.0, 90.0, True, numeric_edges(17, 90, True, 15))
GAIN = NumericColumn("gain", 0.0, 100.0, False, (0.0, 1.0, 50.0, 100.0))
SEX = CategoricalColumn("sex", ("Female", "Male"))
WORK = CategoricalColumn("work", ("?", "Private", "State-gov", "Other"))
DOMAIN = Domain((AGE, GAIN, SEX, WORK))


def frame(**overrides: list[str]) -> pd.DataFrame:
    base = {
        "age": ["17", " 40 ", "90", "53"],
        "gain": ["0", "0.5", "100", "1e1"],
        "sex": ["Female", " Male", "Male ", "Female"],
        "work": ["?", "Private", "State-gov", "Private"],
    }
    base.update(overrides)
    return pd.DataFrame(base, dtype=str)


def encode(df: pd.DataFrame, **kw: object):
    return encode_frame(df, DOMAIN, source="t.csv", **kw)  # type: ignore[arg-type]


def only(err: pytest.ExceptionInfo[DiagnosticError], code: str):
    assert err.value.codes == [code], err.value.codes
    return err.value.diagnostics[0]


def test_codes_scaling_and_bins() -> None:
    t = encode(frame()).table
    assert t.codes["sex"].tolist() == [0, 1, 1, 0]  # whitespace stripped
    assert t.codes["work"].tolist() == [0, 1, 2, 1]  # "?" is a category, not missing
    np.testing.assert_allclose(t.scaled["age"], (np.array([17, 40, 90, 53]) - 17) / 73)
    assert t.codes["age"].tolist() == AGE.bin_of(np.array([17.0, 40, 90, 53])).tolist()
    assert t.codes["age"][2] == AGE.card - 1  # the top integer lands in the last bin
    assert t.codes["gain"].tolist() == [0, 0, 2, 1]  # edges [0, 1, 50, 100]
    assert all(v.dtype == np.int32 for v in t.codes.values())


def test_decode_round_trip_in_original_units() -> None:
    df = frame()
    out = decode(encode(df).table)
    assert out.columns.tolist() == list(DOMAIN.names)
    assert out["age"].tolist() == [17, 40, 90, 53]
    np.testing.assert_allclose(out["gain"], [0, 0.5, 100, 10])
    assert out["sex"].tolist() == ["Female", "Male", "Male", "Female"]


def test_decode_values_clips_and_rounds() -> None:
    out = decode_values(
        DOMAIN,
        {"sex": np.array([1, 0]), "work": np.array([3, 0])},
        {"age": np.array([-0.5, 0.5]), "gain": np.array([1.2, 0.25])},
    )
    assert out["age"].tolist() == [17, 54]  # clipped to lo; 17 + 36.5 rounds to even 54
    assert out["gain"].tolist() == [100.0, 25.0]
    assert out["work"].tolist() == ["Other", "?"]


def test_out_of_bounds_values_are_clipped_and_counted_for_the_curator() -> None:
    r = encode(frame(age=["3", "40", "200", "95"], gain=["-1", "0", "0", "0"]))
    assert r.table.scaled["age"].tolist()[0::2] == [0.0, 1.0]
    assert r.curator_log.clipped_low == {"age": 1, "gain": 1}
    assert r.curator_log.clipped_high == {"age": 2}


def test_extra_columns_are_ignored_with_a_curator_note() -> None:
    df = frame()
    df[" notes "] = "x"
    r = encode(df)
    assert r.curator_log.ignored_columns == ("notes",)
    assert set(r.table.codes) == set(DOMAIN.names)


def test_an_undeclared_category_is_a_missing_cell_without_a_catch_all() -> None:
    r = encode(frame(work=["Privat", "Privat", "Gov", "Private"]), missing={"work": Fill("?")})
    assert r.table.codes["work"].tolist() == [0, 0, 0, 1]  # filled like an empty cell
    assert r.curator_log.undeclared == {"work": 3} and r.curator_log.missing == {}
    r = encode(frame(work=["Privat", "Private", "?", "?"]))  # no rule, not nullable: drop
    assert r.table.n == 3 and r.curator_log.rows_read == 4


def test_undeclared_category_maps_to_the_other_catch_all() -> None:
    r = encode(frame(work=["Privat", "Private", "Gov", "?"]), other={"work": "Other"})
    assert r.table.codes["work"].tolist() == [3, 1, 3, 0]
    assert r.curator_log.undeclared == {"work": 2}


@pytest.mark.parametrize(
    "bad", ["abc", "NaN", "inf", "-Infinity", "1,5", "12 3", "1e400", "9" * 4400]
)
def test_a_cell_that_is_not_a_finite_number_is_a_missing_cell(bad: str) -> None:
    r = encode(frame(age=["17", "18", bad, "19"]), missing={"age": Fill(30.0)})
    assert r.table.scaled["age"].tolist() == pytest.approx([0.0, 1 / 73, 13 / 73, 2 / 73])
    assert r.curator_log.undeclared == {"age": 1}


def test_a_fraction_in_an_integer_column_is_taken_as_written() -> None:
    r = encode(frame(age=["17", "39.5", " 39 ", "19"]))
    assert r.table.scaled["age"].tolist() == pytest.approx([0.0, 22.5 / 73, 22 / 73, 2 / 73])


def test_without_a_rule_a_nullable_column_keeps_and_another_drops() -> None:
    age = NumericColumn("age", 17.0, 90.0, True, numeric_edges(17, 90, True, 15), nullable=True)
    domain = Domain((age, GAIN, SEX, WORK))
    df = frame(age=["17", "", "x", "19"], sex=["Male", "", "Male", "Male"])
    r = encode_frame(df, domain)
    assert r.table.n == 3  # the row with an empty sex is dropped
    assert r.table.codes["age"].tolist()[1] == age.null_code  # 'x' kept as missing
    assert r.curator_log.missing == {"age": 1, "sex": 1} and r.curator_log.undeclared == {"age": 1}


def test_no_rows_left_after_drop_is_a_table_of_no_rows() -> None:
    r = encode(frame(sex=["", "", "", ""]), missing={"sex": "drop"})
    assert r.table.n == 0 and r.curator_log.rows_read == 4


def test_drop_and_fill_policies() -> None:
    df = frame(age=["17", "", "90", "53"], sex=["Female", "Male", "", "Female"])
    r = encode(df, missing={"age": "drop", "sex": Fill("Male")})
    assert r.table.n == 3 and r.curator_log.rows_kept == 3 and r.curator_log.rows_read == 4
    assert r.table.codes["sex"].tolist() == [0, 1, 0]  # row 2 dropped, row 3 filled
    assert r.curator_log.missing == {"age": 1, "sex": 1}
    r = encode(frame(age=["17", "", "90", "53"]), missing={"age": Fill(30.0)})
    assert r.table.scaled["age"][1] == pytest.approx(13 / 73)


def test_missing_column_names_data_columns_only_on_request() -> None:
    df = frame().rename(columns={"work": "Work"})
    with pytest.raises(DiagnosticError) as err:
        encode(df)
    d = only(err, "E404")
    assert "'work'" in d.message and d.hint is not None and "Work" not in d.hint
    assert d.values == "closest data column: 'Work'"


def test_inspect_lists_every_cell_a_rule_handled_with_rows_and_values() -> None:
    df = frame(age=["x", "", "3", "200"], work=["nope", "?", "nope", "?"])
    found = {c.column: c for c in inspect_frame(df, DOMAIN)}
    age, work = found["age"], found["work"]
    assert (age.empty, age.unreadable, age.below, age.above) == (1, 1, 1, 1)
    assert age.rows == {"empty": (2,), "unreadable": (1,), "below": (3,), "above": (4,)}
    assert age.examples == (("x", 1, 1),)
    assert work.unreadable == 2 and work.rows["unreadable"] == (1, 3)
    assert work.examples == (("nope", 2, 1),) and work.distinct == 1
    assert not found["sex"].rows and not found["gain"].rows


@pytest.mark.parametrize(
    ("missing", "other"),
    [
        ({"agee": "drop"}, {}),
        ({"sex": Fill("Unknown")}, {}),
        ({"age": Fill(200.0)}, {}),
        ({}, {"work": "Nope"}),
        ({}, {"age": "17"}),
    ],
)
def test_invalid_policies(missing: dict, other: dict) -> None:
    with pytest.raises(DiagnosticError) as err:
        encode(frame(), missing=missing, other=other)
    assert set(err.value.codes) == {"E408"}


def test_native_types_from_parquet() -> None:
    df = pd.DataFrame(
        {
            "age": pd.array([17, None, 90, 53], dtype="Int64"),
            "gain": [0.0, np.nan, 100.0, 10.0],
            "sex": pd.array(["Female", "Male", None, "Female"], dtype="string"),
            "work": ["?", "Private", "State-gov", "Private"],
        }
    )
    r = encode_frame(df, DOMAIN, {"age": "drop", "gain": "drop", "sex": "drop"})
    assert r.table.n == 2 and r.curator_log.missing == {"age": 1, "gain": 1, "sex": 1}
    coded = Domain((CategoricalColumn("k", ("1", "2")),))
    k = encode_frame(pd.DataFrame({"k": pd.array([2, 1], dtype="Int64")}), coded).table.codes
    assert k["k"].tolist() == [1, 0]  # integer-coded categories compare as text


def test_unusable_storage_types_and_stored_infinities() -> None:
    df = frame().astype(object)
    df["age"] = [True, False, True, True]
    df["sex"] = [1.0, 2.0, 1.0, 1.0]
    with pytest.raises(DiagnosticError) as err:
        encode(df)
    assert err.value.codes == ["E406", "E406"]
    df = frame().astype(object)
    df["gain"] = [0.0, np.inf, 1.0, 2.0]
    r = encode(df.astype({"gain": float}), missing={"gain": "drop"})
    assert r.table.n == 3 and r.curator_log.undeclared == {"gain": 1}


def test_decimal_cells_are_parsed_correctly_rounded():
    """Every engine parses decimal text to the nearest double (as Python's float does), so the
    in-memory and DuckDB engines agree bit for bit whatever pandas is installed."""
    from dpql.data.codec import _decimals

    rng = np.random.default_rng(0)
    texts = [repr(float(x)) for x in rng.random(5_000) * 10.0 ** rng.integers(-8, 9, 5_000)]
    texts += ["0.40363318573081286", "+1.5", "-.5", "5.", "1E3", "1e400", "-0", "1" * 4300]
    got = _decimals(pd.Series([*texts, None], dtype="string"))
    assert [float(t) for t in texts] == got[:-1].tolist() and np.isnan(got[-1])


# Declared missing values (sentinels): a cell holding one is a missing cell, like an empty one.
FAGE = NumericColumn(
    "fage", 12.0, 70.0, True, numeric_edges(12, 70, True, 4), missing_values=(0.0, -9.0)
)
RACE = CategoricalColumn("race", ("a", "b", "Other"), missing_values=("NA", ".", "99"))
SENTINELS = Domain((FAGE, RACE))


def sentinel_frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "fage": ["30", "0", " -9 ", "0.0", "-0", "", "5", "x", "-9.000"],
            "race": ["a", "NA", " . ", "b", "na", "", "99", "zzz", "NA "],
        },
        dtype=str,
    )


def test_a_declared_missing_value_is_a_missing_cell_under_keep() -> None:
    domain = Domain(tuple(replace(c, nullable=True) for c in SENTINELS))
    fage, race = domain
    r = encode_frame(sentinel_frame(), domain, {"fage": "keep", "race": "keep"})
    null_fage = r.table.codes["fage"] == fage.null_code
    # 0, -9, 0.0, -0 and -9.000 equal a declared value as doubles; "" is empty; "x" unreadable
    assert np.flatnonzero(null_fage).tolist() == [1, 2, 3, 4, 5, 7, 8]
    assert r.table.scaled["fage"][6] == 0.0  # 5 is not declared: clipped to the bound 12
    null_race = r.table.codes["race"] == race.null_code
    # "NA", " . ", "99" and "NA " (stripped) are declared; "na" differs in case; "zzz" undeclared
    assert np.flatnonzero(null_race).tolist() == [1, 2, 4, 5, 6, 7, 8]
    assert r.curator_log.missing == {"fage": 6, "race": 5}  # empty or declared
    assert r.curator_log.undeclared == {"fage": 1, "race": 2}
    assert r.curator_log.clipped_low == {"fage": 1}  # only 5: a sentinel is never clipped


def test_declared_missing_values_under_drop_fill_and_other() -> None:
    dropped = encode_frame(sentinel_frame(), SENTINELS, {"fage": "drop", "race": "drop"})
    assert dropped.table.n == 1 and dropped.curator_log.rows_kept == 1  # only row 1 is whole
    filled = encode_frame(
        sentinel_frame(), SENTINELS, {"fage": Fill(40.0), "race": Fill("Other")}, {"race": "Other"}
    ).table
    np.testing.assert_allclose(filled.scaled["fage"][[1, 2, 3, 4, 8]], (40 - 12) / 58)
    assert filled.codes["race"].tolist() == [0, 2, 2, 1, 2, 2, 2, 2, 2]
    assert filled.scaled["fage"][0] == pytest.approx((30 - 12) / 58)


def test_declared_missing_values_in_native_storage() -> None:
    df = pd.DataFrame(
        {
            "fage": [30.0, 0.0, -0.0, np.nan, -9.0, 0.5],
            "race": pd.array([1, 99, 2, None, 99, 1], dtype="Int64"),
        }
    )
    race = CategoricalColumn("race", ("1", "2"), nullable=True, missing_values=("99",))
    domain = Domain((replace(FAGE, nullable=True), race))
    r = encode_frame(df, domain, {"fage": "keep", "race": "keep"})
    null = r.table.codes["fage"] == domain["fage"].null_code
    assert np.flatnonzero(null).tolist() == [1, 2, 3, 4]  # 0, -0, empty, -9; 0.5 is clipped
    assert r.table.codes["race"].tolist() == [0, 2, 1, 2, 2, 0]


def test_inspect_counts_declared_missing_cells_apart_from_empty_ones() -> None:
    found = {c.column: c for c in inspect_frame(sentinel_frame(), SENTINELS)}
    fage, race = found["fage"], found["race"]
    assert (fage.empty, fage.declared, fage.unreadable, fage.below) == (1, 5, 1, 1)
    assert fage.rows["declared"] == (2, 3, 4, 5, 9) and fage.rows["below"] == (7,)
    assert (race.empty, race.declared, race.unreadable) == (1, 4, 2)
    assert race.rows["declared"] == (2, 3, 7, 9)
    assert {v for v, _, _ in race.examples} == {"na", "zzz"}  # never the declared values


def test_a_declared_missing_value_encodes_exactly_as_an_empty_cell() -> None:
    """Everything after the codec (measurements, the curator log's counts) sees a sentinel cell
    as it sees an empty one, under every rule."""
    domain = Domain(tuple(replace(c, nullable=True) for c in SENTINELS))
    blank = sentinel_frame().replace({"fage": {"0": "", " -9 ": ""}, "race": {"NA": ""}})
    for rules, other in [
        ({"fage": "keep", "race": "keep"}, {}),
        ({"fage": "drop", "race": "drop"}, {}),
        ({"fage": Fill(40.0), "race": Fill("Other")}, {"race": "Other"}),
    ]:
        a = encode_frame(sentinel_frame(), domain, rules, other)
        b = encode_frame(blank, domain, rules, other)
        assert a.table.n == b.table.n
        for name in domain.names:
            np.testing.assert_array_equal(a.table.codes[name], b.table.codes[name])
        np.testing.assert_array_equal(a.table.scaled["fage"], b.table.scaled["fage"])
        assert a.curator_log.missing == b.curator_log.missing
