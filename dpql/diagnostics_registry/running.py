"""The codes of a release's run and of its record: the private data (``E4xx``), requirements
and post-processing (``E5xx``, ``W5xx``), evaluation and release-time refusals (``E6xx``), record
verification (``V0xx``)."""

from __future__ import annotations

from dpql.diagnostics_registry.base import (
    COMPILE,
    EVALUATE,
    KEYGEN,
    PLANS,
    READS_DATA,
    VERIFY,
    EntryList,
)

ENTRIES = EntryList()

# ------------------------------------------------------------------------------------------------
# the private data (E4xx)

DATA_LOAD, CODEC = "dpql.data.load", "dpql.codec"
SQL_ENGINE = "dpql.data.engines.sql_engine"
DUCKDB, SPARK = "dpql.data.engines.duckdb", "dpql.data.engines.spark"

ENTRIES.error(
    "E401",
    "data file cannot be opened (missing, a directory, no permission)",
    READS_DATA,
    DATA_LOAD,
    points="the file",
)
ENTRIES.error(
    "E402",
    "data format cannot be inferred from the file name",
    READS_DATA,
    DATA_LOAD,
    points="the file",
)
ENTRIES.error(
    "E403",
    "data file is empty, or no rows are left after dropping missing values",
    READS_DATA,
    DATA_LOAD,
    SQL_ENGINE,
    details="data file is empty, has no rows, or no rows are left after `missing: drop`",
    points="the file",
)
ENTRIES.error(
    "E404",
    "a column declared in the schema is absent from the data",
    READS_DATA,
    CODEC,
    details="a column declared in the schema is absent from the data (the data's other column "
    "names are shown only with `--show-values`)",
    points="the header line",
)
ENTRIES.error(
    "E405",
    "categorical cells with values not declared in the schema (and no 'other' catch-all)",
    READS_DATA,
    CODEC,
    details="a categorical column has cells whose value is not among its `values` and no "
    "`other` catch-all: the number of such rows and a row; the hint suggests "
    "`schema.COLUMN.other` (a catch-all chosen without looking at the data), never adding the "
    "value",
    points="that row",
)
ENTRIES.error(
    "E406",
    "a numeric cell is not a finite number, or a column's storage type cannot hold it",
    READS_DATA,
    CODEC,
    details="a numeric cell is not a finite number (the number of such rows and a row, not the "
    "cell), or a column's storage type cannot hold the column",
    points="that row, or the file",
)
ENTRIES.error(
    "E407",
    "missing values in a column whose missing-value rule is 'error'",
    READS_DATA,
    CODEC,
    details="missing cells in a column whose missing-value rule is `error`: their number and the "
    "first row; the hint gives `drop` (n stays the public `data.rows`), `fill` and, for "
    "categorical columns, `other`",
    points="the first such row",
)
ENTRIES.error(
    "E408",
    "missing-value rule names an unknown column or a value outside the domain",
    READS_DATA,
    CODEC,
    details="a missing-value rule names an unknown column, or a `fill`/`other` value outside the "
    "domain (public spec values; the spec loader's `E109` catches these first)",
    points="-",
)
ENTRIES.error(
    "E409",
    "data file is malformed (CSV syntax, gzip, Parquet, text encoding)",
    READS_DATA,
    DATA_LOAD,
    DUCKDB,
    SPARK,
    details="the file is malformed (CSV syntax such as a row with the wrong number of fields, "
    "gzip, Parquet, text encoding); the reader's own message only with `--show-values`",
    points="the line, when known",
)
ENTRIES.error(
    "E410",
    "the measurement engine failed on the data (message from the engine)",
    COMPILE,
    DUCKDB,
    SPARK,
    details="the measurement engine failed on the data (DuckDB or Spark; out of memory or disk, "
    "mostly), or cannot run (Spark without pyspark or Java): the error's class, its message only "
    "with `--show-values`",
    points="the file",
)

# ------------------------------------------------------------------------------------------------
# requirements and post-processing (E5xx, W5xx)

REQUIREMENTS, ACCEPTANCE = "dpql.plan.requirements", "dpql.plan.acceptance"
IPROJ = "dpql.postprocess.iproj"

ENTRIES.error(
    "E501",
    "a requirement names an unknown column, or a column of the wrong kind",
    PLANS,
    REQUIREMENTS,
)
ENTRIES.error(
    "E502",
    "a requirement's value is undefined on the noisy answers (constant column, empty condition)",
    COMPILE,
    REQUIREMENTS,
)
ENTRIES.error(
    "E503",
    "no synthetic row has finite values for the post-processing measures",
    COMPILE,
    IPROJ,
)
ENTRIES.error(
    "E505",
    "a model requirement's metric cannot be DP-tested (`auc`: no public sensitivity)",
    PLANS,
    ACCEPTANCE,
)
ENTRIES.warning(
    "W501",
    "the synthetic table has one distinct row on the measures: post-processing cannot change it",
    COMPILE,
    IPROJ,
)
ENTRIES.warning(
    "W502", "some measures are constant on the synthetic rows and cannot move", COMPILE, IPROJ
)
ENTRIES.warning("W503", "synthetic rows with NaN measures get weight 0", COMPILE, IPROJ)
ENTRIES.warning(
    "W504",
    "the measured statistics lie outside what reweighting the synthetic rows can reach",
    COMPILE,
    IPROJ,
)
ENTRIES.warning(
    "W505", "the I-projection solver stopped short of the KKT conditions", COMPILE, IPROJ
)
ENTRIES.warning(
    "W508",
    "meeting the post-processing targets would concentrate the table: held at the "
    "effective-sample-size floor",
    COMPILE,
    IPROJ,
)
ENTRIES.warning(
    "W510",
    "post-processing could not bring a requirement within reach of a pass",
    COMPILE,
    "dpql.postprocess.run",
)
ENTRIES.warning(
    "W511",
    "the noise leaves a requirement no room for a pass: post-processing leaves it alone",
    COMPILE,
    "dpql.postprocess.run",
)
ENTRIES.warning(
    "W506",
    "a tolerance the budget cannot decide, or a bound no table meets",
    PLANS,
    ACCEPTANCE,
    details="a tolerance the budget cannot decide (the hint gives the smallest epsilon that can), "
    "or a bound no table meets",
)
ENTRIES.warning(
    "W509",
    "post-processing takes more than a quarter of the budget, at the synthesizer's expense",
    PLANS,
    "dpql.plan.planner",
)
ENTRIES.warning(
    "W507",
    "requirements in a spec without `postprocess`: they are never tested",
    PLANS,
    ACCEPTANCE,
)

# ------------------------------------------------------------------------------------------------
# evaluation and release-time refusals (E6xx)

ENTRIES.error(
    "E601",
    "`dpql evaluate --label` does not name a categorical column of the schema",
    EVALUATE,
    "dpql.evaluate.report",
    details="`dpql evaluate --label` does not name a categorical column of the schema (with a "
    "did-you-mean)",
)
ENTRIES.error(
    "E602",
    "`dpql evaluate` needs scikit-learn and matplotlib, which are not importable",
    EVALUATE,
    "dpql.evaluate.cli",
)
ENTRIES.warning(
    "W601",
    "data columns not in the schema are ignored (their names, on the curator's terminal only)",
    COMPILE,
    "dpql.pipeline",
    details="the data file has columns the schema does not declare; they are ignored. `dpql "
    "compile` names them (the file's header, never a cell value) in a note on the curator's "
    "terminal; the note never reaches the table, the record or the ledger",
)
ENTRIES.error(
    "E611",
    "privacy budget exceeded: the run would spend more than the plan allocated (a bug in dpql)",
    COMPILE,
    "dpql.pipeline",
    details="privacy budget exceeded: a mechanism call would have taken the composed spend over "
    "the plan's budget (the ledger is an odometer and refuses it before drawing noise), or the "
    "spend recomputed from the ledger by the accountant exceeds the budget before writing. The "
    "run spent more than the plan allocated, a bug in dpql: report it",
)
ENTRIES.error(
    "E612",
    "the curator file or its HMAC key is unusable",
    READS_DATA,
    "dpql.curator",
    details="the curator file or its HMAC key is unusable: `output.curator` is the path of a "
    "published output, `$DPQL_CURATOR_KEY` is not at least 32 bytes of hex, or the key file "
    "`dpql-curator.key` is not a regular file of mode 0600 (or is malformed)",
)

ENTRIES.error(
    "E613",
    "an output location is unusable (checked before any data is read)",
    COMPILE,
    "dpql.commit",
    details="an output location is unusable, checked before any data is read: the table, record "
    "or curator path is a directory (or not a regular file), two outputs share one path, or a "
    "folder cannot be created or written. Nothing is read or spent",
)
ENTRIES.error(
    "E614",
    "an earlier release is already written at the outputs (`--force` replaces it)",
    COMPILE,
    "dpql.commit",
    details="the table or record of an earlier release is already at the spec's outputs: a "
    "second compile would spend the budget again. Refused before any data is read unless "
    "`dpql compile --force`",
)
ENTRIES.error(
    "E615",
    "the lifetime ledger cannot be used",
    ("check", "compile"),
    "dpql.lifetime",
    "dpql.commit",
    details="the lifetime ledger cannot be used: it is a directory or not a regular file, its "
    "folder cannot be created or written, a policy names a ledger that does not exist (create "
    "it empty before the first release), or `dpql compile --policy` would record in another "
    "ledger than the policy's. Checked before any data is read",
)


# ------------------------------------------------------------------------------------------------
# record verification (V0xx)

PROVENANCE, AUDIT = "dpql.provenance", "dpql.audit"

ENTRIES.error(
    "V000",
    "the record file cannot be read (missing, too large, not UTF-8, not JSON)",
    VERIFY,
    AUDIT,
)
ENTRIES.error("V001", "not a provenance record of the current version", VERIFY, PROVENANCE)
ENTRIES.error(
    "V002",
    "an event is malformed",
    VERIFY,
    PROVENANCE,
    details="an event is malformed (e.g. an external event whose charged (epsilon, delta) is not "
    "the replace-one conversion of its declared budget)",
)
ENTRIES.error(
    "V003",
    "the record does not validate against `spec/provenance.schema.json`",
    VERIFY,
    PROVENANCE,
)
ENTRIES.error(
    "V004",
    "a value of the record is out of range: nested too deep, a number that is not finite, an "
    "integer too long or above 2^63, or a delta outside the range of a spec's delta",
    VERIFY,
    PROVENANCE,
)
ENTRIES.error(
    "V010",
    "the epsilon recomputed from the events differs from `spent.epsilon`",
    VERIFY,
    PROVENANCE,
)
ENTRIES.error("V011", "the spent epsilon exceeds the budget", VERIFY, PROVENANCE)
ENTRIES.error("V012", "the spent delta exceeds the budget", VERIFY, PROVENANCE)
ENTRIES.error(
    "V013",
    "`spent.rho` is not the recomputed rho (it must be null unless every event is zCDP)",
    VERIFY,
    PROVENANCE,
)
ENTRIES.error(
    "V014",
    "the stored RDP curve (`privacy.rdp`) is not the one the events give, or does not convert "
    "to `spent.epsilon`",
    VERIFY,
    PROVENANCE,
)
ENTRIES.error(
    "V015",
    "the record's privacy budget is not the one its embedded spec gives",
    VERIFY,
    AUDIT,
)
ENTRIES.error(
    "V016",
    "an event differs from the one the re-plan of the embedded spec schedules, or is not in it",
    VERIFY,
    AUDIT,
)
ENTRIES.error(
    "V017",
    "an event the re-plan of the embedded spec schedules is missing from the record",
    VERIFY,
    AUDIT,
)
ENTRIES.error("V020", "the spec in the record does not match `spec_sha256`", VERIFY, PROVENANCE)
ENTRIES.error(
    "V021",
    "the embedded spec does not load, is not in normalised form, or cannot be planned",
    VERIFY,
    AUDIT,
)
ENTRIES.error(
    "V022",
    "`plan_sha256` is not the hash of the embedded spec's plan",
    VERIFY,
    AUDIT,
)
ENTRIES.error(
    "V030", "the synthetic table does not match the record's output hash", VERIFY, PROVENANCE
)
ENTRIES.error(
    "V031",
    "the synthetic table given with `--synthetic` cannot be read (missing, not a regular file)",
    VERIFY,
    PROVENANCE,
)
ENTRIES.error("V040", "the record is unsigned, and `--key` asks for a signature", VERIFY, AUDIT)
ENTRIES.error(
    "V041",
    "the signature is malformed or does not match the record's content (changed after signing)",
    VERIFY,
    AUDIT,
)
ENTRIES.error(
    "V042", "the record was signed by another key than the one `--key` gives", VERIFY, AUDIT
)
ENTRIES.error("V043", "the public key file given with `--key` cannot be used", VERIFY, AUDIT)
ENTRIES.error(
    "V044",
    "the signature matches the content, but the file's bytes are not the ones dpql wrote",
    VERIFY,
    AUDIT,
)
ENTRIES.error(
    "V045",
    "a signing key cannot be used: `dpql keygen` cannot write the pair, or `dpql compile "
    "--sign-key` names a missing, malformed or world-readable key (refused before any data is "
    "read)",
    (*KEYGEN, *COMPILE),
    "dpql.cli",
    "dpql.pipeline",
)
