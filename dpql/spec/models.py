"""Pydantic models of the release spec (``*.release.yaml``) and the privacy policy.

The models check each field on its own (types, ranges, allowed choices, unknown keys); checks
across fields (min < max, edges covering the bounds, budget form, split phases, missing-value
rules) run afterwards in :mod:`dpql.spec.load`, where every problem gets a source position.
``spec/release.schema.json`` and ``spec/policy.schema.json`` are generated from these models.
The ``schema`` entries' models are in :mod:`dpql.spec.columns`, the shared field types, limits
and base model in :mod:`dpql.spec.fields`.

Missing values (the ``missing`` keys). A top-level ``missing: keep | drop`` is the default for
every column (``keep`` when absent); a column may override it with its own ``missing``. A cell is
missing when it is empty, when it holds one of the column's declared ``missing_values`` (public
sentinels such as 0, -9 or "NA", never a value of the column: E113), and also when it cannot be
read as a value of the column (a number that does not parse or is not finite, a category not
among ``values`` with no ``other``, every cell of a malformed CSV row; :mod:`dpql.data.codec`),
so every rule is total: no cell makes a release fail (design invariant 6). ``dpql validate`` is
the curator's strict look at such cells.

* ``drop``: a row with a missing value in this column is left out of every measurement: it
  contributes zero to every sum, and averages are still divided by the public n. ``data.rows``
  stays the file's public row count (or another public figure) and must never depend on the
  data: not the count after dropping, which reveals how many private rows had missing values.
  Neighbouring tables have n rows each; a record that is dropped contributes zero and one that
  is kept a vector in the query's range, so replacing one changes each sum by at most what the
  sensitivities already allow. A data-dependent count (e.g. of complete rows) is only ever a DP
  count: a ``count(...)`` query in the workload, noisy and charged to the ledger like any other;
* ``fill``: replace a missing value by the column's public ``fill`` value (a category of
  ``values``, or a number in ``[min, max]``);
* ``other`` (categorical only): map to the column's declared ``other`` category, the catch-all
  that also receives values not listed in ``values``;
* ``keep`` (default): missingness is a public state of the column, one extra code after its
  values (a null category) or bins (a null bin), present whether or not the data has missing
  cells; it is measured and synthesized like any other value and written back as an empty cell;
* declared ``missing_values`` are a per-record map of public values, like the rules above: the
  neighbouring relation and every sensitivity are the same with or without them;
* ``error`` is no longer a rule: whether a release happens would depend on one record. A spec
  that says it gets a located error (E109) naming the rules above and ``dpql validate``.

Privacy split. ``privacy.split`` optionally divides the synthesizer's part of the budget (what
is left after ``postprocess.share``) between its phases: ``selection``/``measurement`` for rap
(default 1/4 and 3/4 of each adaptive round; Vietri et al. 2022, App. C, use one half each),
``autoencoder``/``generator`` for gan (the two DP-SGD phases Tantipongpipat et al. 2019 compose
by Lemma 4, §3.3). Shares are positive and sum to 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, ConfigDict, Field, field_validator, model_validator

from dpql.spec.columns import ColumnSpec
from dpql.spec.fields import (
    MAX_COLUMNS,
    MAX_DESCRIPTION_CHARS,
    MAX_NAME_CHARS,
    MAX_REQUIREMENTS,
    MAX_SHARE,
    MAX_WORKLOAD_ITEMS,
    MIN_SHARE,
    Delta,
    DslStr,
    Epsilon,
    NonEmptyStr,
    PathStr,
    Probability,
    Rho,
    Rows,
    Share,
    SpecModel,
    SplitShare,
)


def _zero_or_share(value: float) -> float:
    if value != 0 and value < MIN_SHARE:
        raise ValueError(f"should be 0 or at least {MIN_SHARE:g}")
    return value


#: the synthesizer methods: one backend package ``dpql/synth/<method>/`` each
#: (``dpql.synth.base.BACKENDS`` is built from this list), one options model each below
Method = Literal["rap", "gan", "external", "aim", "auto"]
METHODS: tuple[str, ...] = get_args(Method)
PostprocessMethod = Literal["iproj"]
Phase = Literal["selection", "measurement", "autoencoder", "generator"]
#: the ``privacy.split`` phases each method reads (auto's: those of rap, which it may choose)
PHASES_OF_METHOD: dict[str, frozenset[str]] = {
    "rap": frozenset({"selection", "measurement"}),
    "gan": frozenset({"autoencoder", "generator"}),
    "external": frozenset(),
    "aim": frozenset(),
    "auto": frozenset({"selection", "measurement"}),
}


class DataSpec(SpecModel):
    """Where the private table is and its public size."""

    path: PathStr = Field(description="Data file, relative to the spec file.")
    rows: Rows = Field(
        description="Public row count n: the file's published row count (or another public "
        "figure), never computed from the data (not the count after missing: drop). "
        "Neighbouring tables: replace-one, both with n rows."
    )
    format: Literal["csv", "parquet"] | None = Field(
        None, description="File format; inferred from the path's extension when absent."
    )
    engine: Literal["auto", "memory", "duckdb", "spark"] = Field(
        "auto", description="Measurement engine; auto picks one from the data size."
    )


class PrivacySpec(SpecModel):
    """The release budget: ``epsilon`` and ``delta``, or a zCDP ``rho`` (optionally ``delta``,
    the delta at which rho is reported as (epsilon, delta))."""

    epsilon: Epsilon | None = None
    delta: Delta | None = None
    rho: Rho | None = None
    split: dict[Phase, SplitShare] | None = Field(
        None, description="Shares of the synthesizer budget per phase; they sum to 1."
    )


class RapOptions(SpecModel):
    """Every RAP++ knob (Vietri et al. 2022, Algorithms 1 and 2), with its default; the one
    options model of the rap backend (``dpql.synth.rap``), so each option error has a position
    in the spec."""

    rounds: Annotated[int, Field(gt=0, le=1_000)] = 8
    queries_per_round: Annotated[int, Field(gt=0, le=100_000)] = 4
    threshold_rounds: Annotated[int, Field(ge=0, le=1_000)] = 3
    thresholds_per_round: Annotated[int, Field(gt=0, le=100_000)] = 20
    relaxed_rows: Annotated[int, Field(gt=0, le=10**9)] = 1000
    iterations: Annotated[int, Field(gt=0, le=10**6)] = 400
    warm_iterations: Annotated[int, Field(gt=0, le=10**6)] = 200
    learning_rate: Annotated[float, Field(gt=0, le=1e3, allow_inf_nan=False)] = 0.05
    sigma_start: Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)] = 8.0
    sigma_max: Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)] = 512.0
    init_share: Share = 0.2
    threshold_share: Share = 0.25

    @model_validator(mode="after")
    def _consistent(self) -> RapOptions:
        if self.init_share + self.threshold_share > MAX_SHARE:
            raise ValueError(
                f"should have init_share + threshold_share at most {MAX_SHARE:g} (the marginal "
                "rounds need a share of the budget)"
            )
        if self.sigma_start > self.sigma_max:
            raise ValueError("need sigma_start <= sigma_max")
        return self

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> RapOptions:
        """Build from a mapping (tests, benchmarks); raises ``ValueError`` on a bad option."""
        return cls.model_validate(dict(options), strict=False)


class RapSynthesizer(SpecModel):
    method: Literal["rap"]
    rows: Rows = Field(description="Rows of the synthetic table.")
    options: RapOptions = RapOptions()


PositiveInt = Annotated[int, Field(gt=0, le=10**9)]
PositiveFloat = Annotated[float, Field(gt=0, le=1e9, allow_inf_nan=False)]
LayerWidths = Annotated[tuple[PositiveInt, ...], Field(min_length=1, strict=False)]
NoisePair = Annotated[tuple[PositiveFloat, PositiveFloat], Field(strict=False)]


#: the options ``preset: paper`` sets where the spec leaves them unset: the paper's Adult setting
#: (Tantipongpipat et al. 2019, App. E.1), min-max encoding and no measured marginals
GAN_PAPER_PRESET: Mapping[str, Any] = {
    "encoding": "minmax",
    "ae_batch_size": 64,
    "ae_steps": 10_000,
    "critic_batch_size": 128,
    "critic_steps": 15_000,
    "critic_steps_per_generator_step": 15,
}


class GanOptions(SpecModel):
    """Every DP-auto-GAN knob (architecture, optimisation, DP-SGD): the one options model of the
    gan backend (``dpql.synth.gan``). The defaults are the best measured configuration
    (``benchmarks/gan``): public-bin encoding, DP-measured marginals, fine-tuning, and fewer,
    larger DP-SGD steps than the paper's; ``preset: paper`` gives the paper's Adult setting
    (Tantipongpipat et al. 2019, App. E.1; :data:`GAN_PAPER_PRESET`) to every option the spec
    leaves unset. ``noise_multipliers = [psi_autoencoder, psi_critic]`` fixes the noise as in
    the paper's reproduction runs; unset, the planner calibrates both to the budget. ``seed``
    seeds parameter initialisation only, never DP noise or sampling."""

    preset: Literal["default", "paper"] = Field(
        "default",
        description="Defaults of the options left unset: default (the best measured: encoding "
        "bins, measured marginals, fine-tuning, 1000 + 1000 DP-SGD steps of 256 rows) or paper "
        "(Tantipongpipat et al. 2019, App. E.1: encoding minmax, no measured marginals, "
        "ae_batch_size 64, ae_steps 10000, critic_batch_size 128, critic_steps 15000, "
        "critic_steps_per_generator_step 15).",
    )
    ae_latent_dim: PositiveInt = 15
    ae_hidden: PositiveInt | None = None
    ae_batch_size: PositiveInt = 256
    ae_steps: PositiveInt = 1000
    ae_learning_rate: PositiveFloat = 0.005
    ae_clip_norm: PositiveFloat = 0.012
    critic_hidden: LayerWidths | None = None
    critic_batch_size: PositiveInt = 256
    critic_steps: PositiveInt = 1000
    critic_learning_rate: PositiveFloat = 0.005
    critic_clip_norm: PositiveFloat = 0.022
    critic_weight_clip: PositiveFloat = 0.01
    critic_steps_per_generator_step: PositiveInt = 5
    generator_noise_dim: PositiveInt = 64
    generator_learning_rate: PositiveFloat = 0.005
    generator_layer_norm: bool = True
    noise_multipliers: NoisePair | None = None
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] = 0
    encoding: Literal["minmax", "bins"] = Field(
        "bins",
        description="Numeric columns as a one-hot block over their public bins plus a "
        "within-bin offset, or as one min-max-scaled coordinate (the paper's; preset: paper).",
    )
    integer_levels: Annotated[int, Field(ge=0, le=256)] = Field(
        16,
        description="With encoding: bins, an integer column with at most this many values is "
        "one-hot over its values (0: never).",
    )
    marginal_share: (
        Annotated[float, Field(ge=0.0, le=0.9), AfterValidator(_zero_or_share)] | None
    ) = Field(
        None,
        description="Fraction of the synthesizer's rho spent on one Gaussian release of DP "
        "marginals (phase gan.marginals): every 1-way marginal, and with encoding: bins the "
        "workload's k-way marginals chosen by marginal_ways and marginal_noise_limit. The "
        "generator is fitted to them and the table resampled to the 1-way ones. Default: 0.5 "
        "with encoding: bins, 0 (no measurement, plain sampling) with minmax.",
    )
    marginal_ways: Annotated[int, Field(ge=1, le=3)] = Field(
        2,
        description="With encoding: bins, the highest order of the measured marginals: the "
        "k-way sub-marginals (k <= marginal_ways) of the workload's marginals are candidates; "
        "1: only the 1-way marginals.",
    )
    marginal_noise_limit: Annotated[float, Field(gt=0.0, le=10.0, allow_inf_nan=False)] = Field(
        1.0,
        description="A candidate k-way marginal is measured only while its expected L1 noise "
        "(sqrt(2/pi) sigma cells, as a fraction of n) stays below this; candidates are taken "
        "smallest first (public: the domain, the workload and the budget).",
    )
    marginal_weight: Annotated[float, Field(ge=0.0, le=1e6, allow_inf_nan=False)] = Field(
        1.0,
        description="Weight lambda of the marginal penalty added to the generator's WGAN loss "
        "(encoding: bins with measured marginals).",
    )
    finetune_steps: Annotated[int, Field(ge=0, le=10**6)] = Field(
        2000,
        description="Non-private Adam steps of generator and decoder on the marginal penalty "
        "alone after DP-SGD (post-processing of DP outputs; encoding: bins with measured "
        "marginals).",
    )
    finetune_batch_size: Annotated[int, Field(ge=1, le=1 << 16)] = Field(
        1024, description="Generated rows per fine-tuning step."
    )
    finetune_learning_rate: PositiveFloat = Field(
        0.002, description="Adam learning rate of the fine-tuning steps."
    )
    resample_pool: Annotated[int, Field(ge=1, le=16)] = Field(
        4,
        description="With measured marginals: generated rows per synthetic row in the pool "
        "the resampling (raking to the 1-way marginals) draws from.",
    )

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: Any) -> Any:
        # the paper preset changes the defaults only: options the spec sets keep their values
        if isinstance(data, Mapping) and data.get("preset") == "paper":
            return {**GAN_PAPER_PRESET, **data}
        return data

    @property
    def effective_marginal_share(self) -> float:
        """``marginal_share``, or its default for the encoding (0.5 bins, 0 minmax)."""
        if self.marginal_share is not None:
            return self.marginal_share
        return 0.5 if self.encoding == "bins" else 0.0

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None = None) -> GanOptions:
        """Build from a mapping (tests, benchmarks); raises ``ValueError`` on a bad option."""
        return cls.model_validate(dict(options or {}), strict=False)


class GanSynthesizer(SpecModel):
    method: Literal["gan"]
    rows: Rows = Field(description="Rows of the synthetic table.")
    options: GanOptions = GanOptions()


class AimOptions(SpecModel):
    """AIM on mbi's graphical-model estimator (``dpql.synth.aim``): a fixed schedule of
    ``rounds`` select-and-measure rounds after one release of every 1-way marginal."""

    rounds: Annotated[int, Field(gt=0, le=1_000)] | None = Field(
        None,
        description="Adaptive rounds; default: one marginal per column (4 to 16; 16 "
        "where the signal is abundant, fewer where noise would swamp them), in at most 4 rounds "
        "(dpql.synth.aim.plan.default_schedule).",
    )
    per_round: Annotated[int, Field(gt=0, le=1_000)] | None = Field(
        None,
        description="Marginals selected and measured per round; default: by the rule "
        "above with rounds unset, else 1.",
    )
    init_share: Share | None = Field(
        None,
        description="Share of rho on the 1-way marginals; default: enough for 0.05 "
        "expected L1 noise per column, within [0.2, 0.5]; 0.9 if only one marginal is affordable "
        "(dpql.synth.aim.plan.default_schedule).",
    )
    select_share: Share = 0.1
    tree: bool = Field(
        True, description="Before the adaptive rounds, one round that selects a spanning forest "
        "of the 2-way candidates (MST's maximum spanning tree, McKenna et al. 2021: one "
        "exponential-mechanism pick per edge, each among the pairs that join two components, "
        "scored against the 1-way model) and measures it, so that every column is measured with "
        "another; by default only where the budget affords a pair for each edge and as many "
        "adaptive marginals besides, or where each edge's noise sd is at most 1/300 of n "
        "(dpql.synth.aim.plan.spanning_picks, FOREST_SHARE_MAX, FOREST_SNR_MIN)."
    )
    tree_weight: Annotated[float, Field(gt=0, le=16, allow_inf_nan=False)] = Field(
        0.5, description="Budget of each spanning-forest pair relative to an adaptive pick "
        "(a pair has fewer cells than most adaptive picks, so less budget buys it the same noise "
        "L1)."
    )
    max_model_size: Annotated[float, Field(gt=0, le=4096, allow_inf_nan=False)] | None = Field(
        None,
        description="Cap on the graphical model's size in MB (AIM's model-size filter, on a "
        "round's picks together); default: the smaller of this machine's cap (10 MB per CPU core "
        "within [20, 80], 80: AIM's reference, and at most 1/32 of the memory limit; "
        "dpql.synth.aim.plan.machine_model_cap) and the cap that bounds the fits' work (model "
        "cells x mirror-descent steps, summed over the schedule's fits, at most 1e8 per CPU core; "
        "dpql.synth.aim.plan.work_model_cap), so that synthesis time stays bounded where a large "
        "n makes large cliques cheap to measure.",
    )
    iters: Annotated[int, Field(gt=0, le=10**6)] = 250
    final_iters: Annotated[int, Field(ge=0, le=10**6)] = 1000
    balance_sweeps: Annotated[int, Field(ge=0, le=1_000)] = Field(
        16,
        description="Passes of the row balancer over the columns (0: off): the sampled rows "
        "are rearranged by value swaps within each column so that their workload marginals come "
        "closer to the model's expected counts (dpql.synth.aim.graphical.balance_rows).",
    )
    pool_rare: bool = Field(
        True,
        description="Fit the model to the 1-way answers with each column's rare cells "
        "(noisy count below 3 sigma) shrunk towards their mean (empirical Bayes; MST's domain "
        "compression where noise dwarfs them; dpql.synth.aim.program.pool_rare).",
    )

    compress: bool = Field(
        True,
        description="Merge each column's rare cells (noisy 1-way count below 3 sigma, two or "
        "more, together below 3 times their sum's noise sd) into one cell for the pair "
        "selections and measurements and the model, MST's domain "
        "compression; a row in the merged cell gets one of its values in proportion to the "
        "1-way answers (dpql.synth.aim.program.FitDomain).",
    )

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None = None) -> AimOptions:
        """Build from a mapping (tests, benchmarks); raises ``ValueError`` on a bad option."""
        return cls.model_validate(dict(options or {}), strict=False)


class AimSynthesizer(SpecModel):
    method: Literal["aim"]
    rows: Rows = Field(description="Rows of the synthetic table.")
    options: AimOptions = AimOptions()


class AutoSynthesizer(SpecModel):
    """The planner picks the backend and its options from public facts (``dpql.synth.auto``).
    The default when ``synthesizer`` has no ``method``."""

    method: Literal["auto"] = "auto"
    rows: Rows = Field(description="Rows of the synthetic table.")


Neighbouring = Literal["replace_one", "add_remove"]


class ExternalBudget(SpecModel):
    """The (epsilon, delta)-DP guarantee another tool declares for its table, and the
    neighbouring relation it holds under. dpql's relation is replace-one at the public n; an
    ``add_remove`` guarantee (e, d) is charged as (2e, (1 + e^e) d) by group privacy (a
    replacement is a removal then an addition)."""

    epsilon: Epsilon = Field(description="The declared epsilon.")
    delta: Delta = Field(description="The declared delta.")
    neighbouring: Neighbouring = Field(
        description="Relation the declared guarantee holds under: replace_one (same n, one row "
        "replaced) or add_remove (one row added or removed; charged as (2 epsilon, "
        "(1 + e^epsilon) delta))."
    )


class ExternalSynthesizer(SpecModel):
    """A table synthesised elsewhere under its own budget; dpql only post-processes it."""

    method: Literal["external"]
    path: PathStr = Field(description="The external synthetic table, relative to the spec.")
    budget: ExternalBudget = Field(
        description="The (epsilon, delta) the external table was made with, and its relation."
    )
    rows: Rows | None = Field(None, description="Rows to output; default: the table's.")


SynthesizerSpec = Annotated[
    RapSynthesizer | GanSynthesizer | ExternalSynthesizer | AimSynthesizer | AutoSynthesizer,
    Field(discriminator="method"),
]


class PostprocessSpec(SpecModel):
    method: PostprocessMethod
    share: Share | None = Field(
        None,
        description="Fraction of the release budget for post-processing (its measurements and "
        "acceptance tests). Unset: the planner chooses the least that reaches every "
        "requirement's tolerance, at most half (spec/language.md 11).",
    )


class OutputSpec(SpecModel):
    path: PathStr = Field(
        description="Synthetic table, relative to the spec file, written in the format its name "
        "says: *.csv, *.csv.gz or *.parquet."
    )
    provenance: PathStr = Field(description="Provenance record (JSON).")
    ledger: PathStr | None = Field(
        None,
        description="Lifetime release ledger (JSONL): one line per release (its budget, spend "
        "and RDP curve), composed by dpql check --policy.",
    )
    curator: PathStr | None = Field(
        None,
        description="CURATOR-ONLY file (true row count, clip counts, keyed HMAC of the data "
        "file, timings), relative to the spec file; never publish it. Default: "
        "curator/<table stem>.CURATOR-ONLY.json. Its HMAC key is $DPQL_CURATOR_KEY, else "
        "dpql-curator.key (mode 0600) in the same folder. Left out of the normalised spec.",
    )


class ReleaseSpec(SpecModel):
    """A release spec, version 1 (``dpql: 1``)."""

    model_config = ConfigDict(title="dpql release spec")

    dpql: Literal[1] = Field(description="Spec format version.")
    name: Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]
    description: Annotated[str, Field(max_length=MAX_DESCRIPTION_CHARS)] = ""
    data: DataSpec
    columns: dict[str, ColumnSpec] = Field(alias="schema", min_length=1, max_length=MAX_COLUMNS)
    missing: Literal["error", "drop", "keep"] = Field(
        "keep",
        description="Default missing-value rule of every column: keep (with method: gan, whose "
        "encoding has no null state, drop); 'error' is refused: use dpql validate for the strict "
        "look at the data.",
    )
    privacy: PrivacySpec
    workload: list[DslStr] = Field(
        min_length=1, max_length=MAX_WORKLOAD_ITEMS, description="DSL query expressions."
    )
    requirements: list[DslStr] = Field(
        default_factory=list,
        max_length=MAX_REQUIREMENTS,
        description="DSL requirement expressions.",
    )
    synthesizer: SynthesizerSpec
    postprocess: PostprocessSpec | None = Field(
        None,
        description="Post-processing toward the requirements; {method: iproj} when the spec "
        "lists requirements and leaves it out, none with `postprocess: null`.",
    )
    output: OutputSpec

    @model_validator(mode="before")
    @classmethod
    def _default_missing(cls, v: Any) -> Any:
        # the gan synthesizer's encoding has no null state: its default rule is drop
        if isinstance(v, dict) and "missing" not in v:
            synth = v.get("synthesizer")
            if isinstance(synth, dict) and synth.get("method") == "gan":
                return {**v, "missing": "drop"}
        return v

    @model_validator(mode="before")
    @classmethod
    def _default_postprocess(cls, v: Any) -> Any:
        # requirements are tested only through post-processing's measurements, so a spec that
        # lists them gets it unless it says `postprocess: null`
        if isinstance(v, dict) and v.get("requirements") and "postprocess" not in v:
            return {**v, "postprocess": {"method": "iproj"}}
        return v

    @field_validator("requirements", mode="before")
    @classmethod
    def _absent_requirements(cls, v: Any) -> Any:
        return [] if v is None else v  # `requirements:` with nothing under it

    @field_validator("synthesizer", mode="before")
    @classmethod
    def _default_method(cls, v: Any) -> Any:
        # no `method:` means the planner's choice (method: auto, spec/language.md 11)
        return {"method": "auto", **v} if isinstance(v, dict) and "method" not in v else v


class Lifetime(SpecModel):
    epsilon: PositiveFloat = Field(description="Total epsilon over all releases of the source.")
    delta: Probability | None = Field(
        None,
        description="Total delta over all releases of the source (the deltas add); unset: "
        "the summed delta is reported but not capped.",
    )
    ledger: PathStr = Field(description="Release ledger (JSONL), relative to the policy.")
    composition: Literal["basic", "rdp"] = Field(
        "basic",
        description="How releases add up against the cap: `basic` (default), epsilons and deltas "
        "add, the reading every custodian shares; `rdp`, also the tighter composition of the "
        "releases' RDP curves, enforced when it gives the smaller epsilon.",
    )


class ProjectFile(SpecModel):
    """A project file (``dpql.yaml``): the policy and the lifetime ledger of every spec in its
    folder and below, paths relative to the project file (docs/privacy.md, "The lifetime
    ledger")."""

    model_config = ConfigDict(title="dpql project file")

    policy: NonEmptyStr | None = Field(None, description="Privacy policy, relative to this file.")
    ledger: NonEmptyStr | None = Field(
        None,
        description="Lifetime release ledger (JSONL), relative to this file; with a policy that "
        "names a lifetime.ledger it must be that ledger.",
    )


class PolicyRequire(SpecModel):
    public_bounds: bool = True
    delta_below_inverse_rows: bool = True


class Policy(SpecModel):
    """A privacy policy checked by ``dpql check --policy`` (``dpql-policy: 1``)."""

    model_config = ConfigDict(title="dpql privacy policy")

    dpql_policy: Literal[1] = Field(alias="dpql-policy", description="Policy format version.")
    max_epsilon: PositiveFloat
    max_delta: Probability
    max_minutes: Annotated[float, Field(gt=0, le=10**7, allow_inf_nan=False)] | None = Field(
        None,
        description="Most minutes dpql compile may be estimated to take (the compile estimate "
        "of dpql plan); a spec estimated to run longer is refused.",
    )
    lifetime: Lifetime | None = None
    forbidden_columns: list[NonEmptyStr] = Field(default_factory=list)
    allowed_methods: list[Literal[Method, PostprocessMethod]] = Field(
        default_factory=lambda: [*METHODS, *get_args(PostprocessMethod)]
    )
    require: PolicyRequire = PolicyRequire()
