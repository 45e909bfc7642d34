"""The codes of a release's run and of its record: the private data (``E4xx``), requirements
and post-processing (``E5xx``, ``W5xx``), evaluation and release-time refusals (``E6xx``), record
verification (``V0xx``)."""

from __future__ import annotations

from dpql.diagnostics_registry.base import (
    CHECK,
    COMPILE,
    DATA_FILE,
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

DATA_LOAD, CODEC = "dpql.data.load", "dpql.data.codec"
SQL_ENGINE = "dpql.data.engines.sql_engine"
DUCKDB, SPARK = "dpql.data.engines.duckdb", "dpql.data.engines.spark"

ENTRIES.error(
    "E401",
    "data file cannot be opened (missing, a directory, no permission)",
    ("init", *DATA_FILE),
    DATA_LOAD,
    points="the file",
)
ENTRIES.error(
    "E402",
    "data format cannot be inferred from the file name",
    DATA_FILE,
    DATA_LOAD,
    points="the file",
)
ENTRIES.error(
    "E403",
    "data file is empty or has no rows",
    DATA_FILE,
    DATA_LOAD,
    "dpql.data.frame",
    SQL_ENGINE,
    details="data file is empty, has no header line or no rows (no rows left after "
    "`missing: drop` is not an error: a release never depends on one record)",
    points="the file",
)
ENTRIES.error(
    "E404",
    "a column declared in the schema is absent from the data",
    DATA_FILE,
    CODEC,
    details="a column declared in the schema is absent from the data (the data's other column "
    "names are shown only with `--show-values`)",
    points="the header line",
)
ENTRIES.error(
    "E405",
    "categorical cells with values not declared in the schema (no longer an error)",
    DATA_FILE,
    details="categorical cells with values not declared in the schema: an undeclared category "
    "now goes to the column's `other` catch-all, else it is a missing cell under the column's "
    "rule; `dpql validate` lists such cells",
    reserved=True,
)
ENTRIES.error(
    "E406",
    "a column's storage type cannot hold it",
    DATA_FILE,
    CODEC,
    details="a column's storage type cannot hold it (e.g. a Parquet boolean for a numeric "
    "column); a cell that is not a finite number is no longer an error but a missing cell under "
    "the column's rule (`dpql validate` lists them)",
    points="the file",
)
ENTRIES.error(
    "E407",
    "missing values in a column whose missing-value rule is 'error' (no longer an error)",
    DATA_FILE,
    details="missing values under `missing: error`: that rule is now refused in the spec "
    "(`E109`); `dpql validate` lists empty cells",
    reserved=True,
)
ENTRIES.error(
    "E408",
    "missing-value rule names an unknown column or a value outside the domain",
    DATA_FILE,
    CODEC,
    details="a missing-value rule names an unknown column, or a `fill`/`other` value outside the "
    "domain (public spec values; the spec loader's `E109` catches these first)",
    points="-",
)
ENTRIES.error(
    "E409",
    "data file is malformed (CSV syntax, gzip, Parquet, text encoding)",
    (*DATA_FILE, "init"),
    DATA_LOAD,
    "dpql.data.header",
    DUCKDB,
    SPARK,
    details="the file as a whole is malformed (gzip, Parquet, a header that is not UTF-8 or "
    "names a column twice), or a line is longer than 8 MiB; a malformed record (wrong number of "
    "fields, bytes that are not UTF-8) is not an error but a row of empty cells; the reader's own "
    "message only with `--show-values`",
    points="the line, when known",
)
ENTRIES.error(
    "E411",
    "the data file has more rows than data.rows",
    DATA_FILE,
    DATA_LOAD,
    details="the data file has more rows than the public `data.rows` (reading stops there, so "
    "a file that expands without end, such as a gzip bomb, is refused early)",
    points="the file",
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

ENTRIES.error(
    "E412",
    "an external (public) table does not fit the schema",
    COMPILE,
    DATA_LOAD,
    details="an external synthesizer's table (public) has a cell outside the schema: a value "
    "not declared, a number not finite or out of bounds, an empty cell outside a `missing: "
    "keep` column, or a malformed row; the message names the row, the column and the value",
    points="the file",
)

# ------------------------------------------------------------------------------------------------
# requirements and post-processing (E5xx, W5xx)

REQUIREMENTS, ACCEPTANCE = "dpql.plan.requirements", "dpql.plan.acceptance"
ESTIMATES = "dpql.plan.estimates"
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
    ESTIMATES,
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
    "requirements in a spec with `postprocess: null`: they are never tested",
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
    "dpql.release.curator",
    details="the curator file or its HMAC key is unusable: `output.curator` is the path of a "
    "published output, `$DPQL_CURATOR_KEY` is not at least 32 bytes of hex, or the key file "
    "`dpql-curator.key` is not a regular file of mode 0600 (or is malformed)",
)

ENTRIES.error(
    "E613",
    "an output location is unusable (checked before any data is read)",
    (*CHECK, "compile"),
    "dpql.release.commit",
    details="an output location is unusable, checked before any data is read: the table, record "
    "or curator path is a directory (or not a regular file), two outputs (the ledger and the "
    "curator key included) are one file, a path holds a NUL byte or a name longer than the file "
    "system allows, or a folder cannot be created or written. Nothing is read or spent",
)
ENTRIES.error(
    "E618",
    "an output or the ledger is an input of the release (checked before any data is read)",
    ("plan", *CHECK, "compile", "evaluate"),
    "dpql.release.commit",
    "dpql.evaluate.cli",
    details="the table, record, curator file, curator HMAC key or lifetime ledger is the spec, "
    "the data file, a values or group file, the external table, the policy or the signing key "
    "(the same path, after resolving links, or the same file): writing it would destroy the "
    "input; or `dpql evaluate`'s report folder is or holds one of its inputs; or `dpql plan "
    "--output` is one of the release's files. Nothing is read, written or spent",
    points="the output's path in the spec",
)
ENTRIES.error(
    "E619",
    "the curator file or its HMAC key, or an evaluation report, is inside the published folder",
    (*CHECK, "compile", "evaluate"),
    "dpql.release.commit",
    "dpql.evaluate.cli",
    details="the curator file or `dpql-curator.key` is in the folder of the table or the record "
    "(or below it, when that folder holds neither the spec nor the data): that folder is meant "
    "to be published whole, and the curator file and key never are; or `dpql evaluate --output` "
    "is there. Nothing is read or spent",
    points="`output.curator`",
)
ENTRIES.error(
    "E614",
    "an earlier release is already written at the outputs (`--force` replaces it)",
    COMPILE,
    "dpql.release.commit",
    details="the table or record of an earlier release is already at the spec's outputs: a "
    "second compile would spend the budget again. Refused before any data is read unless "
    "`dpql compile --force`",
)
ENTRIES.error(
    "E615",
    "the lifetime ledger cannot be used",
    ("check", "compile", "ledger"),
    "dpql.release.lifetime",
    "dpql.release.project",
    "dpql.release.ledger_report",
    details="the lifetime ledger cannot be used: it is a directory or not a regular file, its "
    "folder cannot be created or written, or the release would be recorded in another ledger "
    "than the policy's `lifetime.ledger` (or the project file's `ledger`) by `--ledger` or "
    "`output.ledger`; `dpql ledger` found no ledger to show. Checked before any data is read",
)
ENTRIES.error(
    "E616",
    "releases of one data source are recorded in more than one ledger",
    ("check", "compile", "ledger"),
    "dpql.release.project",
    details="releases of the spec's data source are recorded in another ledger than the one "
    "this release answers to (an older per-spec ledger, a default ledger from before a policy "
    "applied, a ledger the policy no longer names): a lifetime cap counts only when every "
    "release of a data source is in one ledger. Merge the ledgers (append the lines, delete "
    "the other file). Checked before any data is read",
)
ENTRIES.error(
    "E617",
    "two project or policy files in one folder: which one decides is ambiguous",
    ("check", "compile", "ledger"),
    "dpql.release.project",
    details="the folder that decides a spec's policy and ledger (the nearest one at or above "
    "the spec holding `dpql.yaml` or a policy file) holds two project files, two policy files, "
    "or a project file beside a policy file it does not name. Keep one, or pass `--policy`",
)


# ------------------------------------------------------------------------------------------------
# record verification (V0xx)

PROVENANCE, AUDIT = "dpql.release.provenance", "dpql.release.verify"
EVENTS = "dpql.release.events"

ENTRIES.error(
    "V000",
    "the record file cannot be read (missing, too large, not UTF-8, not JSON, a duplicate key)",
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
    EVENTS,
)
ENTRIES.error(
    "V017",
    "an event the re-plan of the embedded spec schedules is missing from the record",
    VERIFY,
    EVENTS,
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
    "dpql.cli.verify",
    "dpql.pipeline",
)
