"""Which policy and which lifetime ledger a spec's releases answer to (docs/privacy.md, "The
lifetime ledger"), found the same way by ``dpql compile``, ``dpql check`` and ``dpql ledger``, so
the default workflow cannot record a release where its policy does not look.

Discovery (:func:`discover`): from the spec's folder up to the repository root (the first folder
holding ``.git`` or ``.hg``) or the filesystem root, the nearest folder holding a project file
(``dpql.yaml``/``dpql.yml``) or a policy file (``policy.yaml``, ``policy.yml``, ``*.policy.yaml``
or ``*.policy.yml`` whose top-level mapping has ``dpql-policy``) decides. A project file names
the policy and/or the ledger; a policy file is the policy. Two project files, two policy files,
or a project file beside a policy file it does not name, in one folder, are ambiguous (E617).

The ledger (:func:`choose_ledger`): ``--ledger``, else ``output.ledger``, else the policy's
``lifetime.ledger``, else the project file's ``ledger``, else ``<data file>.ledger.jsonl`` beside
the spec (one default ledger per data file for the specs of a folder). A policy with a
lifetime ledger admits no other (E615). Under a policy with a lifetime cap, releases of the same
data source recorded in any other ledger that dpql can see are refused (E616): the named ledgers
and every ``*ledger*.jsonl`` in the folders of the spec, the data file, the ledger, the policy
and the project file. (Without a cap there is nothing to dodge; the check runs once a policy
applies, so ledgers scattered before it are caught then.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from dpql.diagnostics import Diagnostic, DiagnosticError, SourcePos
from dpql.release.lifetime import (
    ReleaseRecord,
    ledger_location_error,
    of_source,
    read_ledger,
    real_path,
)
from dpql.spec.load import LoadedPolicy, LoadedSpec, load_policy, load_project

PROJECT_FILES = ("dpql.yaml", "dpql.yml")
POLICY_NAMES = ("policy.yaml", "policy.yml")
POLICY_SUFFIXES = (".policy.yaml", ".policy.yml")
ROOT_MARKERS = (".git", ".hg")
LEDGER_GLOB = "*ledger*.jsonl"
_PEEK_BYTES = 1 << 20  # a policy file is far smaller; a larger file is still a candidate


@dataclass(frozen=True)
class Found:
    """What discovery found: ``file``, the project or policy file that decides (None: none up
    to the root), the policy it is or names, and the ledger a project file names."""

    file: Path | None = None
    policy: Path | None = None
    ledger: Path | None = None


def discover(start: Path) -> Found:
    """The nearest project or policy file at or above the folder ``start`` (module docstring).
    Raises DiagnosticError: E617 for two candidates in one folder, the loader's codes for a
    malformed project file."""
    folder = real_path(start)
    while True:
        projects = [folder / n for n in PROJECT_FILES if (folder / n).is_file()]
        policies = _policy_files(folder)
        if len(projects) > 1 or (not projects and len(policies) > 1):
            raise _ambiguous(folder, [*projects, *policies], "")
        if projects:
            project = load_project(projects[0])
            strays = [p for p in policies if real_path(p) != project.policy]
            if strays:
                raise _ambiguous(
                    folder,
                    [projects[0], *strays],
                    f" ({projects[0].name} does not name {strays[0].name} as its policy)",
                )
            return Found(projects[0], project.policy, project.ledger)
        if policies:
            return Found(policies[0], policies[0], None)
        if any((folder / m).exists() for m in ROOT_MARKERS) or folder.parent == folder:
            return Found()
        folder = folder.parent


def _policy_files(folder: Path) -> list[Path]:
    """The policy files of ``folder``: the names of the module docstring, minus the files that
    parse as a mapping without ``dpql-policy`` (a file that does not parse stays a candidate:
    loading it reports the error, rather than a typo silently dropping the policy)."""
    try:
        names = sorted(
            p.name
            for p in folder.iterdir()
            if p.name in POLICY_NAMES or p.name.endswith(POLICY_SUFFIXES)
        )
    except OSError:
        return []
    return [folder / n for n in names if (folder / n).is_file() and _marked(folder / n)]


def _marked(path: Path) -> bool:
    import yaml

    try:
        with open(path, "rb") as f:
            data = yaml.safe_load(f.read(_PEEK_BYTES).decode("utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return True
    return not isinstance(data, dict) or "dpql-policy" in data


def _ambiguous(folder: Path, files: list[Path], why: str) -> DiagnosticError:
    names = ", ".join(p.name for p in files)
    return DiagnosticError(
        [
            Diagnostic(
                "E617",
                f"{folder} holds {names}{why}: dpql cannot tell which one decides the policy "
                "and lifetime ledger of the specs below it",
                SourcePos(str(files[-1])),
                "keep one project file (dpql.yaml, naming `policy:` and `ledger:`) or one policy "
                "file (policy.yaml or NAME.policy.yaml with `dpql-policy: 1`) per folder, or "
                "pass --policy",
            )
        ]
    )


@dataclass(frozen=True)
class LedgerChoice:
    """The policy and ledger a spec's release answers to. ``policy_from``/``ledger_from`` say
    where each came from (for messages); ``data`` is the data source (the data file resolved);
    ``records`` the ledger's lines that count against it
    (:func:`dpql.release.lifetime.of_source`)."""

    policy: LoadedPolicy | None
    policy_from: str
    ledger: Path
    ledger_from: str
    found: Found
    data: Path
    records: tuple[ReleaseRecord, ...]


def default_ledger_path(spec: LoadedSpec, data: Path | None = None) -> Path:
    """The ledger a release is recorded in when nothing names one: ``<data file>.ledger.jsonl``
    beside the spec (``data.path: ../data/train.csv`` -> ``train.csv.ledger.jsonl``), one per
    data file for the specs of a folder. Beside the spec, not the data: a spec elsewhere never
    writes into the data's folder."""
    return spec.resolve(f"{(data or spec.data_path).name}.ledger.jsonl")


def choose_ledger(
    spec: LoadedSpec,
    *,
    ledger: Path | None = None,
    policy: Path | None = None,
    for_write: bool = True,
    data: Path | None = None,
) -> LedgerChoice:
    """The policy (``policy``, i.e. ``--policy``, else the discovered one) and the ledger
    (module docstring) of ``spec``'s release of ``data`` (default: the spec's data file; the
    data source the ledger's lines are counted against). Reads no data. Raises
    DiagnosticError: E615 when the ledgers named disagree with the policy's or the ledger is
    not a usable file (with ``for_write``, as for a compile, its folder must be writable too);
    E616 (under a lifetime cap) when another ledger holds releases of the same data source;
    E617 for an ambiguous discovery; E020/E005 for a ledger that cannot be read; the loader's
    codes for a bad policy or project file."""
    found = discover(Path(spec.path).parent)
    if policy is not None:
        loaded, policy_from = load_policy(policy), "--policy"
    elif found.policy is not None:
        loaded, policy_from = load_policy(found.policy), f"found at {found.policy}"
    else:
        loaded, policy_from = None, ""
    policy_ledger = loaded.ledger_path if loaded is not None else None
    named: list[tuple[Path, str]] = []
    if ledger is not None:
        named.append((Path(ledger).absolute(), "--ledger"))
    if spec.model.output.ledger:
        named.append((spec.resolve(spec.model.output.ledger), "output.ledger"))
    if policy_ledger is not None:
        named.append((policy_ledger, f"lifetime.ledger of {loaded.path}"))  # type: ignore[union-attr]
    if found.ledger is not None:
        named.append((found.ledger, f"ledger of {found.file}"))
    source = data
    path, how = named[0] if named else (default_ledger_path(spec, source), "the default")
    for other, other_how in named[1:]:
        if real_path(other) != real_path(path):
            raise _disagree(path, how, other, other_how, policy_ledger is not None)
    problem = ledger_location_error(path, must_exist=False, named_by=how) if for_write else None
    if problem is not None:
        raise DiagnosticError([problem])
    data = real_path(data if data is not None else spec.data_path)
    records = tuple(r for r in read_ledger(path) if of_source(r, path, data))
    if loaded is None or loaded.model.lifetime is None:  # no cap that another ledger could dodge
        return LedgerChoice(loaded, policy_from, path, how, found, data, records)
    folders = {Path(spec.path).parent, data.parent, path.parent}
    folders |= {p.parent for p in (found.file, loaded.path if loaded else None) if p is not None}
    candidates = {p for p, _ in named} | {default_ledger_path(spec, source)}
    for folder in folders:
        if folder.is_dir():
            candidates |= set(folder.glob(LEDGER_GLOB))
    explicit = {real_path(p) for p, _ in named}
    others = []
    for candidate in sorted(real_path(c) for c in candidates):
        if candidate == real_path(path) or candidate == data or not candidate.is_file():
            continue
        releases = _releases_of(candidate, data, explicit=candidate in explicit)
        if releases:
            others.append((candidate, releases))
    if others:
        raise _several(spec, data, path, how, len(records), others)
    return LedgerChoice(loaded, policy_from, path, how, found, data, records)


def _releases_of(ledger: Path, data: Path, *, explicit: bool) -> int:
    """How many lines of ``ledger`` count against ``data``; 0 for a file found by its name that
    is not a ledger (its first line is not a ledger record)."""
    if not explicit:
        try:
            with open(ledger, encoding="utf-8") as f:
                first = next((line for line in f if line.strip()), "")
            ReleaseRecord.model_validate(json.loads(first))
        except (OSError, UnicodeDecodeError, ValueError, ValidationError):
            return 0
    return sum(of_source(r, ledger, data) for r in read_ledger(ledger))


def _disagree(
    path: Path, how: str, other: Path, other_how: str, has_policy: bool
) -> DiagnosticError:
    return DiagnosticError(
        [
            Diagnostic(
                "E615",
                f"this release would be recorded in {path} ({how}), but {other_how} is {other}",
                SourcePos(str(other)),
                "record every release of a data source in one ledger: "
                + (
                    "the policy's lifetime caps are kept in its lifetime.ledger, so drop "
                    "--ledger/output.ledger or make them name it"
                    if has_policy
                    else "make --ledger, output.ledger and the project file's ledger agree"
                ),
            )
        ]
    )


def _several(
    spec: LoadedSpec, data: Path, path: Path, how: str, here: int, others: list[tuple[Path, int]]
) -> DiagnosticError:
    listed = "; ".join(f"{p} ({n} release(s))" for p, n in others)
    first = others[0][0]
    return DiagnosticError(
        [
            Diagnostic(
                "E616",
                f"releases of the data source {data} are recorded in more than one "
                f"ledger: {path} ({how}, {here} release(s)) and {listed}; a lifetime budget "
                "counts only when every release of a data source is in one ledger. Nothing was "
                "read or spent",
                SourcePos(str(first)),
                f"merge them into {path}: append the other ledgers' lines to it (cat {first} >> "
                f"{path}) and delete them, then dpql ledger {spec.path} shows the total; if "
                "those releases are of another data file, move that ledger out of this folder",
            )
        ]
    )
