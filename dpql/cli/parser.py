"""The command line's arguments: one subcommand per command module of :mod:`dpql.cli`."""

from __future__ import annotations

import argparse

from dpql import __version__
from dpql.cli.check import cmd_check, cmd_ledger
from dpql.cli.compile import cmd_compile
from dpql.cli.data import cmd_evaluate, cmd_init, cmd_validate
from dpql.cli.plan import cmd_plan
from dpql.cli.verify import cmd_keygen, cmd_verify

SPEC_HELP = "the release spec (YAML; dpql init drafts one)"
FORMAT_HELP = "json: one JSON document on stdout, on success and on failure (default: text)"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dpql", description="Compile differentially private synthetic-data releases."
    )
    p.add_argument("--version", action="version", version=f"dpql {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser(
        "init", help="draft a release spec from a data file's header; reads no cell value"
    )
    s.add_argument("data", help="the data file (CSV, gzip CSV or Parquet)")
    s.add_argument("--output", help="the draft's path (default: <data stem>.release.yaml beside "
                   "the data); an existing file is never overwritten")  # fmt: skip
    s.add_argument("--codebook", help="a public codebook (YAML or CSV, docs/init.md) that fills "
                   "types, bounds and categories")  # fmt: skip
    s.add_argument("--format", choices=("text", "json"), default="text", help=FORMAT_HELP)
    s.set_defaults(func=cmd_init)

    s = sub.add_parser("plan", help="show the plan and predicted error; never reads data")
    s.add_argument("spec", help=SPEC_HELP)
    s.add_argument("--output", help="write the plan as versioned JSON")
    s.add_argument("--format", choices=("text", "json"), default="text", help=FORMAT_HELP)
    s.set_defaults(func=cmd_plan)

    s = sub.add_parser("check", help="validate a spec (and a policy) without data; for CI")
    s.add_argument("spec", help=SPEC_HELP)
    s.add_argument(
        "--policy",
        help="the privacy policy (default: the dpql.yaml or policy file found from the spec's "
        "folder upward)",
    )
    s.add_argument("--format", choices=("text", "json"), default="text", help=FORMAT_HELP)
    s.set_defaults(func=cmd_check)

    s = sub.add_parser(
        "ledger",
        help="lifetime spend per data source and per release, against the policy's cap",
    )
    s.add_argument(
        "target",
        nargs="?",
        help="a release spec (its ledger and policy, as compile finds them) or a ledger "
        "(.jsonl); default: the project's ledger found from the current folder upward",
    )
    s.add_argument("--policy", help="the privacy policy whose lifetime cap to report against")
    s.add_argument("--format", choices=("text", "json"), default="text", help=FORMAT_HELP)
    s.set_defaults(func=cmd_ledger)

    s = sub.add_parser("compile", help="run the release: synthetic table + provenance record")
    s.add_argument("spec", help=SPEC_HELP)
    s.add_argument("--seed", type=int, help="fixes optimisation and row sampling (never DP noise)")
    s.add_argument("--quiet", action="store_true", help="no progress bars")
    s.add_argument(
        "--verbose",
        action="store_true",
        help="print elapsed times and stage timings (they scale with the real row count: "
        "curator-only)",
    )
    s.add_argument(
        "--ledger",
        help="lifetime release ledger (JSONL) to record this release in (default: "
        "output.ledger, the policy's lifetime.ledger, the project file's ledger, else "
        "<data file>.ledger.jsonl beside the spec; docs/privacy.md)",
    )
    s.add_argument(
        "--force",
        action="store_true",
        help="replace an earlier release at the same outputs (spends the budget again; both "
        "releases stay in the ledger)",
    )
    s.add_argument(
        "--policy",
        help="enforce this privacy policy, lifetime caps included, before any data is read "
        "(default: the dpql.yaml or policy file found from the spec's folder upward)",
    )
    s.add_argument("--format", choices=("text", "json"), default="text", help=FORMAT_HELP)
    s.add_argument(
        "--show-values",
        action="store_true",
        help="show the offending private data values in data errors (the curator's own "
        "terminal only: never in shared logs or CI); by default errors name the file, row and "
        "column only",
    )
    s.add_argument(
        "--sign-key",
        metavar="KEYFILE",
        help="sign the provenance record with this Ed25519 private key (from dpql keygen)",
    )
    s.add_argument(
        "--no-compile-cache",
        action="store_true",
        help="do not read or write JAX's persistent compilation cache (~/.cache/dpql/jax; "
        "the same as DPQL_NO_JAX_CACHE=1)",
    )
    s.set_defaults(func=cmd_compile)

    s = sub.add_parser(
        "verify",
        help="recompute a provenance record's accounting and hashes, re-plan its spec, check "
        "its signature",
    )
    s.add_argument("record", help="the provenance record (JSON) that dpql compile wrote")
    s.add_argument("--synthetic", help="the released table, to check its hash")
    s.add_argument(
        "--key",
        metavar="PUBKEY",
        help="the curator's public key (KEYFILE.pub from dpql keygen): the record must carry "
        "its valid signature",
    )
    s.add_argument("--format", choices=("text", "json"), default="text", help=FORMAT_HELP)
    s.set_defaults(func=cmd_verify)

    s = sub.add_parser("keygen", help="make an Ed25519 key pair for signing provenance records")
    s.add_argument(
        "--out",
        required=True,
        metavar="KEYFILE",
        help="the private key's path (written with mode 0600); the public key goes to KEYFILE.pub",
    )
    s.add_argument("--format", choices=("text", "json"), default="text", help=FORMAT_HELP)
    s.set_defaults(func=cmd_keygen)

    s = sub.add_parser(
        "validate",
        help="curator-only strict look at the data: empty, undeclared and unreadable cells, "
        "malformed rows, with row numbers (outside the DP guarantee; never publish)",
    )
    s.add_argument("spec", help=SPEC_HELP)
    s.add_argument("--show-values", action="store_true", help="also list the offending values")
    s.add_argument("--format", choices=("text", "json"), default="text", help=FORMAT_HELP)
    s.set_defaults(func=cmd_validate)

    s = sub.add_parser(
        "evaluate", help="curator-only utility report (uses private data; never publish)"
    )
    s.add_argument("spec", help=SPEC_HELP)
    s.add_argument("--synthetic", required=True, help="the synthetic table to evaluate")
    s.add_argument(
        "--holdout",
        help="a real test table (e.g. examples/adult/adult_test.csv.gz); default: a random 20%% "
        "of the real table, the train-on-real models fitting the rest",
    )
    s.add_argument("--label", help="categorical column the TSTR models predict")
    s.add_argument(
        "--output",
        help="report folder (PRIVATE; files mode 0600). Default: <table stem>.CURATOR-ONLY-report "
        "beside the release's curator-only file (curator/ next to the spec unless "
        "output.curator says otherwise), never the published output folder",
    )
    s.add_argument("--format", choices=("text", "json"), default="text", help=FORMAT_HELP)
    s.set_defaults(func=cmd_evaluate)
    return p
