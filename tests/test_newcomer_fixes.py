"""Small fixes a newcomer meets: requirement errors at their line, policy hints, and the
evaluation report's readability (no empty TSTR table, no GAN section for other methods, no
correlations of nominal codes, readable numbers)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import dpql.plan.planner as planner
from dpql.cli import main
from dpql.diagnostics import Diagnostic, DiagnosticError
from dpql.domain import CategoricalColumn, Domain, NumericColumn, numeric_edges
from dpql.evaluate.metrics import bin_labels, readable
from dpql.evaluate.report import default_label
from dpql.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[1]
ADULT = ROOT / "examples" / "adult" / "adult.release.yaml"


def test_a_requirement_expansion_error_points_at_its_line(monkeypatch) -> None:
    spec = load_spec(ADULT)
    real = planner.requirement_queries

    def failing(req, domain):
        if req.text.startswith("corr"):
            raise DiagnosticError([Diagnostic("E501", "cannot be estimated", hint="h")])
        return real(req, domain)

    monkeypatch.setattr(planner, "requirement_queries", failing)
    with pytest.raises(DiagnosticError) as err:
        planner.build_plan(spec)
    (d,) = err.value.diagnostics
    line = spec.source.splitlines()[d.pos.line - 1]
    assert d.code == "E501" and "corr(age, hours_per_week)" in line and d.pos.col > 1


def test_policy_violations_carry_hints(tmp_path: Path, capsys) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "dpql-policy: 1\nmax_epsilon: 0.5\nmax_delta: 1.0e-6\nforbidden_columns: [sex]\n"
        "allowed_methods: [aim, iproj]\n",
        encoding="utf-8",
    )
    assert main(["check", str(ADULT), "--policy", str(policy)]) == 1
    err = capsys.readouterr().err
    heads = [ln for ln in err.splitlines() if ": error[" in ln]
    hints = [ln for ln in err.splitlines() if ln.startswith("  = hint: ")]
    # each at the spec's key to change: privacy.epsilon, the column, synthesizer.method
    assert [h.split(": ")[1] for h in heads] == ["error[P001]", "error[P003]", "error[P004]"]
    assert all(h.startswith(f"{ADULT}:") for h in heads) and len(hints) == 3
    assert "remove 'sex' from the schema" in hints[1]
    assert "allowed_methods (aim, iproj)" in hints[2]


def test_readable_numbers() -> None:
    assert readable(15980.0) == "15,980" and readable(1500000) == "1,500,000"
    assert readable(0.123456) == "0.1235" and readable(12345.678) == "12,345.7"
    col = NumericColumn("w", 10000.0, 1500000.0, False, numeric_edges(10000, 1500000, False, 2))
    assert bin_labels(Domain((col,)), "w") == ("[10,000, 755,000)", "[755,000, 1,500,000]")


def test_default_label_counts_a_kept_null_code_out() -> None:
    kept = CategoricalColumn("smoker", ("no", "yes"), nullable=True)
    three = CategoricalColumn("pet", ("cat", "dog", "yak"))
    assert default_label(Domain((three, kept)), []) == "smoker"
    assert default_label(Domain((three,)), []) is None


def _report(tmp_path: Path, domain: Domain, real: pd.DataFrame, method: str | None):
    pytest.importorskip("sklearn")
    pytest.importorskip("matplotlib")
    from dpql.evaluate import build_report
    from dpql.ir.queries import Marginal

    out = tmp_path / "report"
    report = build_report(domain, real, real.iloc[::-1], [Marginal((domain.names[0],))], [],
                          output_dir=out, method=method)  # fmt: skip
    return report, (out / "index.html").read_text(encoding="utf-8")


def test_report_without_label_or_gan(tmp_path: Path) -> None:
    domain = Domain(
        (
            CategoricalColumn("pet", ("cat", "dog", "yak")),
            CategoricalColumn("colour", ("red", "green", "blue")),
            NumericColumn("w", 0.0, 20000.0, False, numeric_edges(0, 20000, False, 4)),
        )
    )
    real = pd.DataFrame(
        {"pet": ["cat", "dog", "yak"] * 20, "colour": ["red", "blue", "green"] * 20,
         "w": [100.0, 15980.0, 7000.0] * 20}
    )  # fmt: skip
    report, page = _report(tmp_path, domain, real, "aim")
    assert report.tstr == () and "<th>model</th>" not in page  # no empty table
    assert "--label COLUMN" in page
    assert "DP-auto-GAN metrics" not in page
    assert not (tmp_path / "report" / "dimension_wise.png").exists()
    assert report.correlation_columns == ("w",)  # nominal codes have no order
    assert "Fewer than two such columns" in page
    assert "15,000" in " ".join(report.histograms[2].labels)
    assert report.headline is not None and "Largest 1-way shift" in page
    _, gan_page = _report(tmp_path, domain, real, "gan")
    assert "DP-auto-GAN metrics" in gan_page


def test_the_command_line_prints_no_exponent_for_large_numbers() -> None:
    from dpql.cli.output import fmt_number

    assert fmt_number(15980.0) == "15,980" and fmt_number(32561) == "32,561"
    assert fmt_number(0.0123) == "0.0123" and fmt_number(1234.5) == "1234"
