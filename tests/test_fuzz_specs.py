"""Bounded fuzzing of `dpql plan`: byte-level mutations of the example spec and
generated DSL expressions never crash the planner.

Every example runs the CLI in-process (``dpql.cli.main``) and must exit 0, or exit 1 with a
diagnostic naming the spec file; exit 2 (an internal error: any uncaught exception, MemoryError
or RecursionError included) fails the test, and so does a plan that hangs
(``guards.hang_guard``). The default run is small; set ``DPQL_FUZZ_EXAMPLES`` for a longer
one, e.g. ``DPQL_FUZZ_EXAMPLES=2000 python -m pytest tests/test_fuzz_specs.py``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from pathlib import Path

import pytest
from guards import hang_guard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpql.cli import main

ROOT = Path(__file__).resolve().parents[1]
BASE = (ROOT / "examples" / "adult" / "adult.release.yaml").read_bytes()
EXAMPLES = int(os.environ.get("DPQL_FUZZ_EXAMPLES", "25"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Fragments that broke the loader or the planner before, spliced in by mutations.
HOSTILE = [
    b"9" * 5000,
    b"1e308",
    b"-1e308",
    b"5e-324",
    b"0.9999999999999999",
    b"18446744073709551616",
    b"0x" + b"f" * 200,
    b".inf",
    b".nan",
    b"&a [*a]",
    b"*a",
    b"[" * 200,
    b"{" * 100,
    b"not " * 300,
    b"(" * 100,
    b"[/]",
    b"[bold]",
    b"\x00",
    b"\xff\xfe",
    b"\t",
    b": ",
    b" #",
    b"!!python/object:os.system",
    b"<<: *a",
    b"---\n",
    b"&b x",
    b"halfspaces(999999)",
    b"thresholds 999999",
    b"marginals(15)",
    b"weight 1e308",
    b"within 0",
]
ALPHABET = b"[]{}:,&*!|>'\"#-\n\t ()0123456789.eE+-_aZ`~^\\"


@st.composite
def mutated_spec(draw: st.DrawFn) -> bytes:
    data = bytearray(BASE)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["delete", "insert", "replace", "hostile", "duplicate"]))
        if kind == "delete":
            del data[at : at + draw(st.integers(1, 40))]
        elif kind == "insert":  # mostly YAML/DSL punctuation, sometimes any bytes
            chars = st.lists(st.sampled_from(list(ALPHABET)), min_size=1, max_size=8).map(bytes)
            data[at:at] = draw(st.one_of(chars, chars, chars, st.binary(min_size=1, max_size=8)))
        elif kind == "replace":
            chars = draw(st.lists(st.sampled_from(list(ALPHABET)), min_size=1, max_size=6))
            data[at : at + len(chars)] = bytes(chars)
        elif kind == "hostile":
            data[at : at + draw(st.integers(0, 12))] = draw(st.sampled_from(HOSTILE))
        else:
            start = data.rfind(b"\n", 0, at) + 1
            end = data.find(b"\n", at)
            end = len(data) if end < 0 else end + 1
            data[end:end] = data[start:end] * draw(st.integers(1, 3))
    return bytes(data)


# ---- generated DSL

COLUMNS = st.sampled_from(
    ["age", "hours_per_week", "capital_gain", "sex", "income", "workclass", "race", "nope",
     "`odd col`", "`age`", "marginals", "not"]
)  # fmt: skip
# Columns of the right kind most of the time, so that plans get past resolution.
NUMERIC = st.one_of(*[st.sampled_from(["age", "hours_per_week", "education_num"])] * 3, COLUMNS)
LABELS = st.one_of(*[st.sampled_from(["sex", "income"])] * 3, COLUMNS)
NUMBERS = st.one_of(
    st.integers(-100, 100).map(str),
    st.integers(-(10**6), 10**6).map(str),
    st.floats(-1e3, 1e3).map(lambda x: f"{x:.3g}"),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["1e999", "9" * 30, "-0", ".5", "1e-400", "1e308", "5e-324"]),
)
STRINGS = st.sampled_from(['"Female"', '"Male"', "'?'", '">50K"', '"[/]"', '"x\\"y"', '"nope"'])
VALUES = st.one_of(NUMBERS, STRINGS)
OPS = st.sampled_from(["<", "<=", ">", ">=", "==", "!="])
COUNTS = st.one_of(
    st.integers(1, 5).map(str), st.integers(-2, 2000).map(str), st.sampled_from(["0", "9" * 25])
)


def _membership(c: str, vs: list[str]) -> str:
    return f"{c} in {{{', '.join(vs)}}}"


ATOMS = st.one_of(
    st.builds(lambda c, o, v: f"{c} {o} {v}", COLUMNS, OPS, VALUES),
    st.builds(_membership, COLUMNS, st.lists(VALUES, min_size=1, max_size=4)),
)
PREDICATES = st.recursive(
    ATOMS,
    lambda p: st.one_of(
        p.map(lambda x: f"not {x}"),
        st.builds(lambda a, b: f"({a} and {b})", p, p),
        st.builds(lambda a, b: f"{a} or {b}", p, p),
        st.builds(lambda n, x: "not " * n + x, st.integers(0, 80), p),
    ),
    max_leaves=12,
)
COLUMN_LISTS = st.lists(COLUMNS, min_size=1, max_size=4).map(", ".join)
OVER = st.one_of(st.just(""), st.just(" over all"), COLUMN_LISTS.map(lambda c: f" over [{c}]"))
WORKLOAD_ITEMS = st.one_of(
    st.builds(lambda p: f"count({p})", PREDICATES),
    st.builds(lambda c, p: f"mean({c} | {p})", NUMERIC, PREDICATES),
    st.builds(lambda k, o: f"marginals({k}){o}", COUNTS, OVER),
    st.builds(lambda c: f"marginal({c})", COLUMN_LISTS),
    st.builds(
        lambda c, by, m: f"range({c}){by}{m}",
        st.lists(NUMERIC, min_size=1, max_size=3).map(", ".join),
        st.one_of(st.just(""), LABELS.map(lambda b: f" by {b}")),
        st.one_of(st.just(""), COUNTS.map(lambda m: f" thresholds {m}")),
    ),
    st.builds(lambda m, o, by: f"halfspaces({m}){o} by {by}", COUNTS, OVER, LABELS),
    st.text(alphabet="()[]{}|~+,<>=! \"'`abnotdr0123456789.e", max_size=40),
)
TOLERANCES = st.one_of(
    NUMBERS.map(lambda t: f" within {t}"),
    st.builds(
        lambda m, o, b: f" {m} {o} {b}",
        st.sampled_from(["accuracy", "f1", "auc", "r2"]),
        st.sampled_from([">=", "<", ">"]),
        NUMBERS,
    ),
)
WEIGHTS = st.one_of(*[NUMBERS.map(lambda w: f" weight {w}")] * 5, st.just(""))
REQUIREMENTS = st.builds(
    lambda target, tol: target + tol,
    st.one_of(
        st.builds(lambda a, b: f"corr({a}, {b})", NUMERIC, NUMERIC),
        st.builds(lambda c: f"mean({c})", NUMERIC),
        st.builds(lambda c, p: f"mean({c} | {p})", NUMERIC, PREDICATES),
        st.builds(lambda p: f"count({p})", PREDICATES),
        st.builds(lambda y, x: f"logistic({y} ~ {x.replace(', ', ' + ')})", LABELS, COLUMN_LISTS),
    ),
    TOLERANCES,
)


def _with_dsl(workload: list[str], requirements: list[str]) -> bytes:
    """The example spec with its workload and requirements replaced (YAML double-quoted)."""
    text = BASE.decode("utf-8")
    w0, w1 = text.index("workload:\n"), text.index("\n# What downstream")
    r0, r1 = text.index("requirements:\n"), text.index("\nsynthesizer:")
    items = "".join(f"  - {json.dumps(x)}\n" for x in workload)
    reqs = "".join(f"  - {json.dumps(x)}\n" for x in requirements)
    text = text[:w0] + "workload:\n" + items + text[w1:r0] + "requirements:\n" + reqs + text[r1:]
    return text.encode("utf-8")


# ---- the property


def _plan_is_clean(spec: Path, content: bytes, fmt: str, others: tuple[str, ...] = ()) -> None:
    """``others``: file names besides the spec that a diagnostic may point at."""
    spec.write_bytes(content)
    out, err = io.StringIO(), io.StringIO()
    with hang_guard("dpql plan on a fuzzed spec"):
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(["plan", str(spec), "--format", fmt])
    shown = (err.getvalue() + out.getvalue())[-3000:]
    assert rc in (0, 1), f"exit {rc}:\n{shown}"
    assert "internal error" not in err.getvalue() and "Traceback" not in err.getvalue(), shown
    if rc == 1:
        if fmt == "json":
            diags = json.loads(out.getvalue())["diagnostics"]
            assert any(d["severity"] == "error" for d in diags), shown
            names = (spec.name, *others)
            assert all(Path(d["file"]).name in names and d["message"] for d in diags), shown
        else:
            names = "|".join(re.escape(n) for n in (spec.name, *others))
            located = rf"(?:{names})(:\d+:\d+)?: error\[[A-Z]\d{{3}}\]: "
            assert re.search(located, shown), shown
        assert len(err.getvalue()) < 200_000  # messages are clipped


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@FUZZ
@given(content=mutated_spec(), fmt=st.sampled_from(["text", "json"]))
def test_mutated_example_spec_plans_or_fails_cleanly(
    workdir: Path, content: bytes, fmt: str
) -> None:
    _plan_is_clean(workdir / "mutated.release.yaml", content, fmt)


@FUZZ
@given(
    workload=st.lists(WORKLOAD_ITEMS, min_size=1, max_size=3),
    requirements=st.lists(REQUIREMENTS, max_size=3),
    weights=st.one_of(st.none(), st.lists(WEIGHTS, min_size=3, max_size=3)),
    fmt=st.sampled_from(["text", "json"]),
)
def test_generated_dsl_plans_or_fails_cleanly(
    workdir: Path,
    workload: list[str],
    requirements: list[str],
    weights: list[str] | None,
    fmt: str,
) -> None:
    if weights is not None:  # all weighted (mostly), or a mix (E314)
        requirements = [r + w for r, w in zip(requirements, weights, strict=False)]
    _plan_is_clean(workdir / "dsl.release.yaml", _with_dsl(workload, requirements), fmt)


def test_the_unmutated_spec_plans(workdir: Path) -> None:
    """Sanity: the fuzz harness accepts the example itself (exit 0)."""
    out = io.StringIO()
    spec = workdir / "example.release.yaml"
    spec.write_bytes(BASE)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(["plan", str(spec)]) == 0
    assert "compile estimate" in out.getvalue()


# ---- public input files and output paths


RACE = "race:           {type: categorical, values: [Amer-Indian-Eskimo, Asian-Pac-Islander, Black, Other, White]}"
RACES = b"Amer-Indian-Eskimo\nAsian-Pac-Islander\nBlack\nOther\nWhite\n"
GROUPS = b"race,group\nAmer-Indian-Eskimo,other\nAsian-Pac-Islander,other\nBlack,b\nOther,other\nWhite,w\n"
FILE_HOSTILE = [
    b"\x00", b"\xef\xbb\xbf", b"\r\n", b'"', b'"a\nb"', b",", b"x" * 140_000, b"\xff",
    b"Black\n", b"\n\n\n", b"race,group\n", b"\x1b]0;t\x07",
]  # fmt: skip
# Where a spec may point a public file (relative to the spec's folder): hazards made by
# :func:`_hazards`, the data file, a missing file and odd names.
FILE_NAMES = ["file.txt", "loop", "fifo", "to-fifo", "folder", "data.csv", "hard.csv", "missing",
              "../fuzz-inputs/file.txt", "/dev/null", "a\\0b", "a\\e]0;x\\a", "x" * 300]  # fmt: skip


def _mutated(base: bytes, draw: st.DrawFn) -> bytes:
    data = bytearray(base)
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(data)))
        if draw(st.booleans()):
            data[at : at + draw(st.integers(0, 8))] = draw(st.sampled_from(FILE_HOSTILE))
        else:
            del data[at : at + draw(st.integers(1, 20))]
    return bytes(data)


@st.composite
def public_files(draw: st.DrawFn) -> tuple[bytes, bytes, str, str, bool]:
    """(values file, group file, values_file path, group.file path, grouped?)."""
    names = st.one_of(st.just("file.txt"), st.sampled_from(FILE_NAMES))
    return (
        _mutated(RACES, draw),
        _mutated(GROUPS, draw),
        draw(names),
        draw(st.one_of(st.just("groups.csv"), st.sampled_from(FILE_NAMES))),
        draw(st.booleans()),
    )


def _hazards(folder: Path) -> None:
    """The files FILE_NAMES points at: a symlink loop, a FIFO and a link to it, a directory,
    the data file and a hard link of it."""
    if (folder / "loop").is_symlink():
        return
    (folder / "loop").symlink_to("loop")
    os.mkfifo(folder / "fifo")
    (folder / "to-fifo").symlink_to("fifo")
    (folder / "folder").mkdir()
    (folder / "data.csv").write_text("age,race\n39,White\n")
    os.link(folder / "data.csv", folder / "hard.csv")


@FUZZ
@given(files=public_files(), fmt=st.sampled_from(["text", "json"]))
def test_values_and_group_files_plan_or_fail_cleanly(
    workdir: Path, files: tuple[bytes, bytes, str, str, bool], fmt: str
) -> None:
    """Mutated values and group files at hostile paths (a FIFO, a loop, the data file): exit 0
    or a located exit 1, never a hang or a traceback; the data file is never read."""
    values, groups, values_at, groups_at, grouped = files
    _hazards(workdir)
    (workdir / "file.txt").write_bytes(values)
    (workdir / "groups.csv").write_bytes(groups)
    group = f", group: {{file: {json.dumps(groups_at)}}}" if grouped else ""
    text = BASE.decode("utf-8").replace("adult_train.csv.gz", "data.csv")
    text = text.replace(
        RACE, f"race: {{type: categorical, values_file: {json.dumps(values_at)}{group}}}"
    )
    spec = workdir / "files.release.yaml"
    _plan_is_clean(spec, text.encode("utf-8"), fmt, ("file.txt", "groups.csv"))


OUTPUT_NAMES = ["out/t.csv", "out/t.json", "out/c.json", "out/l.jsonl", "spec.yaml", "data.csv",
                "hard.csv", "external.csv", "out", "out/t.csv/x", ".", "x" * 300, "a\\0b",
                "a\\e[2Jb", "/dev/null", "loop", "fifo", "out/dpql-curator.key", "c/../out/t.csv",
                "./data.csv"]  # fmt: skip
SMALL = """dpql: 1
name: fuzz-outputs
data: {{path: data.csv, rows: 100}}
schema:
  age: {{type: numeric, min: 17, max: 90, integer: true, bins: 4}}
  race: {{type: categorical, values: [Black, White]}}
privacy: {{epsilon: 1.0, delta: 1e-9}}
workload: [marginals(2)]
requirements: []
synthesizer:
  method: external
  path: external.csv
  budget: {{epsilon: 0.5, delta: 1e-10, neighbouring: replace_one}}
output:
  path: {table}
  provenance: {record}
{extra}"""


@FUZZ
@given(
    names=st.lists(st.sampled_from(OUTPUT_NAMES), min_size=4, max_size=4),
    given_=st.lists(st.booleans(), min_size=2, max_size=2),
)
def test_output_paths_never_destroy_an_input(
    tmp_path_factory: pytest.TempPathFactory, names: list[str], given_: list[bool]
) -> None:
    """Every output path (table, record, curator file, ledger) drawn from hazards: `dpql
    compile` exits 0 or 1 without a traceback, and the spec, the data and the external table are
    unchanged. A compile that gets past the output checks completes (on the external table)."""
    folder = tmp_path_factory.mktemp("outputs")
    _hazards(folder)
    (folder / "external.csv").write_text("age,race\n30,Black\n40,White\n")
    extra = "".join(
        f"  {key}: {json.dumps(name)}\n"
        for key, name, on in zip(("curator", "ledger"), names[2:], given_, strict=True)
        if on
    )
    spec = folder / "spec.yaml"
    spec.write_text(
        SMALL.format(table=json.dumps(names[0]), record=json.dumps(names[1]), extra=extra)
    )
    inputs = {p: p.read_bytes() for p in (spec, folder / "data.csv", folder / "external.csv")}
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = main(["compile", str(spec), "--quiet"])
    assert rc in (0, 1), err.getvalue()[-3000:]
    assert "Traceback" not in err.getvalue() and "internal error" not in err.getvalue()
    assert "\x1b" not in err.getvalue()
    for path, content in inputs.items():
        assert path.is_file() and path.read_bytes() == content, (path, err.getvalue()[-2000:])
