"""``dpql ledger``: what a lifetime ledger says, per data source and per release, against the
policy's lifetime cap. Reads the ledger and the policy, never the data.

Each data source's total is the one ``dpql check`` and ``dpql compile`` enforce: its lines plus
the lines that name no data source (older or hand-written lines count against every source),
composed as :class:`dpql.release.policy.LifetimeBudget` states it (the smaller sound epsilon of
basic and RDP composition within the caps)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from dpql.diagnostics import Diagnostic, DiagnosticError, SourcePos
from dpql.release.lifetime import ReleaseRecord, read_ledger, real_path, source_path
from dpql.release.policy import ReleaseBudget, lifetime_budget
from dpql.spec.load import LoadedPolicy, load_policy, load_spec


def ledger_report(target: str | None, policy: Path | None = None) -> dict[str, Any]:
    """The report of ``target``: a release spec (its ledger and policy as ``dpql compile``
    finds them, :func:`dpql.release.project.choose_ledger`), a ledger file (``.jsonl``; its policy
    is ``policy`` or the one found from the ledger's folder that keeps it), or None (the ledger
    found from the current folder). One JSON-ready document (``render_report`` prints it)."""
    from dpql.release.project import choose_ledger, discover

    data: Path | None = None
    loaded: LoadedPolicy | None = load_policy(policy) if policy is not None else None
    if target is not None and not target.endswith(".jsonl"):
        spec = load_spec(target)
        choice = choose_ledger(spec, policy=policy, for_write=False)
        ledger, loaded, data = choice.ledger, choice.policy, choice.data
    else:
        start = Path(target).parent if target is not None else Path.cwd()
        found = discover(start)
        if loaded is None and found.policy is not None:
            loaded = load_policy(found.policy)
        keeps = [p for p in (found.ledger, loaded.ledger_path if loaded else None) if p]
        if target is not None:
            ledger = Path(target).absolute()
            if not ledger.exists():
                raise DiagnosticError(
                    [Diagnostic("E005", f"cannot read ledger {ledger}: no such file",
                                SourcePos(str(ledger)))]
                )  # fmt: skip
            if policy is None and real_path(ledger) not in {real_path(p) for p in keeps}:
                loaded = None  # the policy found does not keep this ledger
        elif keeps:
            ledger = keeps[0]
        else:
            raise DiagnosticError(
                [
                    Diagnostic(
                        "E615",
                        f"no lifetime ledger found from {start} upward (no dpql.yaml or policy "
                        "file naming one)",
                        SourcePos(str(start)),
                        "name a release spec or a ledger: dpql ledger SPEC or dpql ledger "
                        "LEDGER.jsonl",
                    )
                ]
            )
    if not Path(ledger).is_file() and Path(ledger).exists():
        raise DiagnosticError(
            [Diagnostic("E615", f"the lifetime ledger {ledger} is not a regular file",
                        SourcePos(str(ledger)))]
        )  # fmt: skip
    return _report(Path(ledger), read_ledger(ledger), loaded, data)


def _report(
    ledger: Path, records: list[ReleaseRecord], policy: LoadedPolicy | None, data: Path | None
) -> dict[str, Any]:
    lifetime = policy.model.lifetime if policy is not None else None
    unnamed = [r for r in records if r.data_source is None]
    groups: dict[Path, list[ReleaseRecord]] = {}
    for r in records:
        if r.data_source is not None:
            groups.setdefault(source_path(r.data_source, ledger), []).append(r)
    if data is not None:
        groups.setdefault(data, [])
    sources = [
        _source(str(path), rs, unnamed, lifetime, path == data)
        for path, rs in sorted(groups.items())
    ]
    if unnamed and not groups:
        sources.append(_source(None, [], unnamed, lifetime, False))
    return {
        "ledger": str(ledger),
        "policy": str(policy.path) if policy is not None else None,
        "lifetime": (
            {"epsilon": lifetime.epsilon, "delta": lifetime.delta} if lifetime is not None else None
        ),
        "unnamed_releases": len(unnamed),
        "sources": sources,
        "notes": _shared_fingerprints(groups),
    }


def _source(
    path: str | None,
    own: list[ReleaseRecord],
    unnamed: list[ReleaseRecord],
    lifetime: Any,
    this_spec: bool,
) -> dict[str, Any]:
    counted = own + unnamed
    cap = lifetime.epsilon if lifetime is not None else math.inf
    budget = lifetime_budget(
        cap,
        counted,
        ReleaseBudget(0.0, 0.0, None),
        lifetime.delta if lifetime else None,
        lifetime.composition if lifetime else "basic",
    )
    spent = {"epsilon": 0.0, "delta": 0.0, "composition": "none"}
    if counted:
        spent = {
            "epsilon": budget.total_epsilon,
            "delta": budget.total_delta,
            "composition": "rdp" if budget.uses_rdp else "basic",
            "basic_epsilon": budget.basic_epsilon,
            "basic_delta": budget.basic_delta,
        }
    return {
        "data": path,
        "this_spec": this_spec,
        "releases": [_release(r, named=r in own) for r in counted],
        "spent": spent,
        "remaining_epsilon": (
            max(cap - spent["epsilon"], 0.0) if lifetime is not None else None
        ),
        "over_cap": bool(
            lifetime is not None and counted and (budget.exceeded or budget.delta_exceeded)
        ),
    }


def _release(r: ReleaseRecord, *, named: bool) -> dict[str, Any]:
    return {
        "name": r.name,
        "time": r.time,
        "status": r.status,
        "epsilon": r.epsilon,
        "delta": r.delta,
        "rho": r.rho,
        "rdp": r.rdp is not None,
        "spec_sha256": r.spec_sha256,
        "names_data_source": named,
    }


def _shared_fingerprints(groups: dict[Path, list[ReleaseRecord]]) -> list[str]:
    """A note for each keyed fingerprint that two data-source paths share: the same file under
    two paths, whose budgets dpql keeps apart (the identity is the path)."""
    paths: dict[str, set[Path]] = {}
    for path, rs in groups.items():
        for r in rs:
            if r.data_source is not None and r.data_source.data_hmac_sha256:
                paths.setdefault(r.data_source.data_hmac_sha256, set()).add(path)
    return [
        "releases of " + " and ".join(sorted(map(str, ps))) + " read files of the same "
        "content (same keyed fingerprint): if they are one data source, keep one path so that "
        "one lifetime budget counts them all"
        for ps in paths.values()
        if len(ps) > 1
    ]


def render_report(report: dict[str, Any]) -> str:
    """``dpql ledger``'s text: a head line, then per data source its total and releases."""
    lt = report["lifetime"]
    cap = (
        f"policy {report['policy']}: lifetime epsilon {lt['epsilon']:g}, delta "
        + (f"{lt['delta']:g}" if lt["delta"] is not None else "not capped")
        if lt is not None
        else "no lifetime cap" + (f" (policy {report['policy']})" if report["policy"] else "")
    )
    lines = [f"ledger {report['ledger']} ({cap})"]
    if not report["sources"]:
        lines.append("no release recorded")
    for s in report["sources"]:
        sp = s["spent"]
        where = s["data"] or "(releases that name no data source)"
        mark = " [this spec's data source]" if s["this_spec"] else ""
        total = f"{len(s['releases'])} release(s)"
        if s["releases"]:
            total += f", epsilon {sp['epsilon']:.4g} at delta {sp['delta']:.3g} "
            total += (
                f"(RDP composition; basic: {sp['basic_epsilon']:.4g})"
                if sp["composition"] == "rdp"
                else "(basic composition)"
            )
        if s["remaining_epsilon"] is not None:
            total += f" of {lt['epsilon']:g}, {s['remaining_epsilon']:.4g} left"
        if s["over_cap"]:
            total += " OVER THE CAP"
        lines.append(f"data source {where}{mark}: {total}")
        for r in s["releases"]:
            unnamed = "" if r["names_data_source"] else " (names no data source)"
            lines.append(
                f"  {r['time']}  {r['name']}  epsilon {r['epsilon']:.4g}  delta "
                f"{r['delta']:.3g}  {r['status']}{unnamed}"
            )
    lines += [f"note: {n}" for n in report["notes"]]
    return "\n".join(lines)

