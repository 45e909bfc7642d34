"""GAN options, planning and accounting: data-free, calibrated, paper epsilons reproduced."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import dpql.synth.gan as gan_package
from dpql.diagnostics import DiagnosticError
from dpql.privacy.accountant import (
    DEFAULT_ORDERS,
    dpsgd_epsilon,
    dpsgd_rdp,
    epsilon_from_events,
    epsilon_from_rdp,
)
from dpql.privacy.ledger import PrivacyEvent
from dpql.synth.gan import GanOptions, plan_gan

ADULT_ROWS = 32561


def _example_options() -> dict:
    import yaml

    root = Path(__file__).resolve().parents[1] / "examples"
    text = (root / "adult-gan" / "adult-gan.release.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)["synthesizer"]["options"]


def test_defaults_are_the_examples_measured_bins_configuration():
    o = GanOptions()
    assert o.preset == "default" and o.encoding == "bins"
    assert o.effective_marginal_share == 0.5 and o.marginal_ways == 2 and o.finetune_steps > 0
    # every option the GAN example sets (the configuration benchmarks/gan measures) is a default
    example = _example_options()
    assert example.pop("marginal_share") == o.effective_marginal_share
    assert {k: getattr(o, k) for k in example} == example


def test_the_paper_preset_is_the_papers_adult_setting_and_spec_values_win():
    o = GanOptions.from_mapping({"preset": "paper"})
    assert o.encoding == "minmax" and o.effective_marginal_share == 0.0
    assert (o.ae_batch_size, o.ae_steps, o.ae_clip_norm, o.ae_latent_dim) == (64, 10_000, 0.012, 15)
    assert (o.critic_batch_size, o.critic_steps, o.critic_clip_norm) == (128, 15_000, 0.022)
    assert (o.critic_steps_per_generator_step, o.generator_noise_dim) == (15, 64)
    mixed = GanOptions.from_mapping({"preset": "paper", "ae_steps": 7, "encoding": "bins"})
    assert (mixed.ae_steps, mixed.encoding, mixed.critic_steps) == (7, "bins", 15_000)
    with pytest.raises(ValueError):
        GanOptions.from_mapping({"preset": "papers"})


def test_options_are_the_specs_model_and_every_problem_is_located(tmp_path):
    o = GanOptions.from_mapping({"ae_steps": 5, "noise_multipliers": [2.5, 7.5], "seed": 3})
    assert (o.ae_steps, o.noise_multipliers, o.seed) == (5, (2.5, 7.5), 3)
    with pytest.raises(ValueError):
        GanOptions.from_mapping({"ae_step": 5})
    from dpql.spec.load import load_spec

    root = Path(__file__).resolve().parents[1] / "examples"
    text = (root / "adult-gan" / "adult-gan.release.yaml").read_text(encoding="utf-8")
    spec = tmp_path / "adult-gan" / "gan.yaml"
    spec.parent.mkdir()
    bad = text.replace("ae_steps: 1000", "ae_step: 5", 1).replace(
        "ae_batch_size: 256", "ae_batch_size: -1", 1
    )
    assert bad != text
    spec.write_text(bad, encoding="utf-8")
    with pytest.raises(DiagnosticError) as err:
        load_spec(spec)
    lines = sorted(d.pos.line for d in err.value.diagnostics if d.pos is not None)
    assert len(err.value.diagnostics) == 2 and len(lines) == 2 and lines[0] > 1
    assert any("ae_step" in d.message for d in err.value.diagnostics)
    assert any("ae_batch_size" in d.message for d in err.value.diagnostics)


def _paper_epsilon(psi_ae: float, psi_critic: float) -> float:
    orders = np.asarray(DEFAULT_ORDERS)
    curve = dpsgd_rdp(64 / ADULT_ROWS, psi_ae, 10_000, orders, neighbouring="add_remove")
    curve = curve + dpsgd_rdp(
        128 / ADULT_ROWS, psi_critic, 15_000, orders, neighbouring="add_remove"
    )
    return epsilon_from_rdp(orders, curve, 1e-5, conversion="classic")[0]


@pytest.mark.parametrize(
    ("psi", "paper_epsilon"), [((5.0, 8.0), 0.3503), ((2.5, 7.5), 0.5084), ((1.5, 3.5), 1.0062)]
)
def test_papers_adult_epsilons_are_reproduced_from_its_noise(psi, paper_epsilon):
    # Digest section 4.4: add/remove relation, classic RDP conversion, 15 000 critic steps.
    assert _paper_epsilon(*psi) == pytest.approx(paper_epsilon, abs=2e-3)
    # dpql's own (replace-one) epsilon for the same noise is larger, never smaller.
    plan = plan_gan(
        GanOptions(noise_multipliers=psi), ADULT_ROWS, SimpleNamespace(epsilon=9, delta=1e-5)
    )
    assert plan.epsilon > paper_epsilon


def test_fixed_noise_above_the_budget_is_a_planning_error():
    options = GanOptions(noise_multipliers=(1.5, 3.5))
    with pytest.raises(DiagnosticError) as err:
        plan_gan(options, ADULT_ROWS, SimpleNamespace(epsilon=1.0, delta=1e-5))
    assert err.value.codes == ["gan-over-budget"]


@pytest.mark.slow
def test_calibrated_plan_spends_the_budget_with_the_releases_other_events():
    options = GanOptions(preset="paper", ae_steps=300, critic_steps=400)
    budget = SimpleNamespace(epsilon=1.0, delta=1e-5)
    # An I-projection-like zCDP measurement planned for the same release (rho = 0.005).
    measured = PrivacyEvent("postprocess", "gaussian", "iproj", l2_sensitivity=1.0,
                            noise_scale=10.0, rho=0.005)  # fmt: skip
    plan = plan_gan(options, 5000, budget, {"autoencoder": 0.3, "generator": 0.7}, [measured])
    total = epsilon_from_events([*plan.events(), measured], 1e-5).epsilon
    assert 0.99 * budget.epsilon <= total <= budget.epsilon
    assert plan.epsilon == epsilon_from_events(plan.events(), 1e-5).epsilon < total
    ae, critic = plan.events()
    assert (ae.phase, ae.mechanism, ae.steps, ae.sampling_rate) == (
        "autoencoder",
        "dpsgd",
        300,
        64 / 5000,
    )
    assert (critic.phase, critic.steps, critic.sampling_rate) == ("generator", 400, 128 / 5000)
    assert (ae.l2_sensitivity, critic.l2_sensitivity) == (0.012, 0.022)
    # The split fixes the autoencoder's stand-alone epsilon; the critic takes the rest.
    alone = dpsgd_epsilon(ae.sampling_rate, ae.noise_multiplier, ae.steps, 1e-5)
    assert alone == pytest.approx(0.3 * budget.epsilon, rel=1e-3)


def test_gan_package_never_imports_the_data_layer():
    for path in Path(gan_package.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not any(n == "dpql.data" or n.startswith("dpql.data.") for n in names), path


def test_gan_defaults_to_drop_and_other_methods_to_keep(tmp_path: Path) -> None:
    """The gan encoding has no null state, so a spec that names no missing rule drops there and
    keeps everywhere else (the default rule is a public fact of the spec, never of the data)."""
    from dpql.spec.load import load_spec

    example = Path(__file__).parent.parent / "examples/adult-gan"
    text = (example / "adult-gan.release.yaml").read_text(encoding="utf-8")
    lines = [ln for ln in text.splitlines() if not ln.startswith("missing:")]
    text = "\n".join(lines).replace(
        "../adult/adult_train.csv.gz", str(example.parent / "adult/adult_train.csv.gz")
    )
    spec = tmp_path / "gan.release.yaml"
    spec.write_text(text, encoding="utf-8")
    assert load_spec(spec).model.missing == "drop"
    adult = load_spec(example.parent / "adult/adult.release.yaml").model
    assert "missing" not in adult.model_fields_set and adult.missing == "keep"
