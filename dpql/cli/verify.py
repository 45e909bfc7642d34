"""``dpql verify`` (a provenance record) and ``dpql keygen`` (the signing key pair)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from dpql.cli.output import (
    EXIT_INPUT,
    EXIT_OK,
    emit_json,
    report_diagnostics,
)
from dpql.diagnostics import Diagnostic, DiagnosticError, SourcePos


def cmd_verify(args: argparse.Namespace) -> int:
    from dpql.release.verify import verify_release

    path = Path(args.record)
    synthetic = Path(args.synthetic) if args.synthetic else None
    result = verify_release(path, synthetic, Path(args.key) if args.key else None)
    doc: dict[str, Any] = {
        "record": str(path),
        "ok": not result.problems,
        "problems": [{"code": p.code, "message": p.message} for p in result.problems],
        "notes": list(result.notes),
    }
    if result.problems:
        if args.format == "json":
            return emit_json(doc, EXIT_INPUT)
        report_diagnostics(
            [Diagnostic(p.code, p.message, SourcePos(str(path))) for p in result.problems], "text"
        )
        return EXIT_INPUT
    record = result.record
    spent = record["privacy"]["spent"]
    checks = [
        f"epsilon {spent['epsilon']:.6g}, delta {spent['delta']:.3g} recomputed from "
        f"{len(record['privacy']['events'])} events",
        "budget, events and plan hash match the plan of the embedded spec",
    ]
    if synthetic:
        checks.append("output hash matches")
    if result.signed_by:
        checks.append(f"signature valid (key sha256 {result.signed_by[:16]}...)")
    if args.format == "json":
        return emit_json(
            doc
            | {
                "spent": spent,
                "events": len(record["privacy"]["events"]),
                "checks": checks,
                "signed_by": result.signed_by,
            }
        )
    for note in result.notes:
        print(f"{path}: note: {note}")
    print(f"{path}: ok ({'; '.join(checks)})")
    return EXIT_OK


def cmd_keygen(args: argparse.Namespace) -> int:
    from dpql.release.signing import SigningError, generate_keypair

    out_path = Path(args.out)
    try:
        private, public, fingerprint = generate_keypair(out_path)
    except (SigningError, OSError) as exc:
        message = str(exc) if isinstance(exc, SigningError) else f"cannot write the key: {exc}"
        raise DiagnosticError([Diagnostic("V045", message, SourcePos(str(out_path)))]) from None
    if args.format == "json":
        return emit_json({"ok": True, "private_key": str(private), "public_key": str(public),
                      "key_sha256": fingerprint})  # fmt: skip
    print(f"private key {private} (mode 0600; keep it secret, never publish it)")
    print(f"public key  {public} (publish it: dpql verify RECORD --key {public})")
    print(f"key sha256  {fingerprint}")
    return EXIT_OK
