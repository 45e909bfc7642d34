"""The post-processing stage of ``dpql compile``: measure the requirements' moments, I-project
the synthetic table toward them, resample, and run the DP acceptance tests."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dpql.domain import EncodedTable
from dpql.plan.oracle import MeasurementOracle
from dpql.postprocess.accept import ModelAcceptance, MomentAcceptance, acceptance_report
from dpql.postprocess.allocation import allocation_scales

if TYPE_CHECKING:  # jax stays out of plan-time imports
    from dpql.postprocess.iproj import IProjResult

@dataclass(frozen=True, eq=False)
class PostprocessOutcome:
    """The post-processed table, the I-projection summary and the acceptance results."""

    table: EncodedTable
    iproj: IProjResult
    acceptance: tuple[ModelAcceptance | MomentAcceptance, ...]

    def requirements_json(self) -> list[dict[str, Any]]:
        return [a.to_json() for a in self.acceptance]

    def summary_json(self) -> dict[str, Any]:
        """The provenance record's ``postprocess`` section (DP outputs and public values)."""
        return {"method": "iproj", **self.iproj.to_json()}

    def to_json(self) -> dict[str, Any]:
        return {"iproj": self.iproj.to_json(), "requirements": self.requirements_json()}


def run_postprocess(
    plan: Any,
    oracle: MeasurementOracle,
    table: EncodedTable,
    seed: int,
    progress: Callable[[str, int, int], None] | None = None,
) -> PostprocessOutcome:
    """The compile step after synthesis: measure the plan's requirement measures (phase
    ``iproj.measure``, noise spread over them by ``allocation.allocation_scales`` at the
    input table's moments), I-project, resample (the external synthesizer's ``rows`` when set, else
    as many rows as the input), then the acceptance tests (phase ``accept``, budget
    ``plan.phase_rho["accept.test"]``). ``plan`` is a :class:`dpql.plan.planner.ReleasePlan`."""
    from dpql.postprocess.iproj import features, iproject, measure

    def tick(i: int) -> None:
        if progress is not None:
            progress("postprocess", i, 3)

    tick(0)
    measures = plan.measures
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column: no gradient there
        synthetic = np.nanmean(features(measures.queries, table), axis=0)
    # The synthetic table is public (the generator's DP output, or the external table with its
    # declared budget), so the noise may be spread by its moments.
    scales = allocation_scales(
        measures, plan.requirements, measures.answer_map(synthetic), table.domain
    )
    measurement = measure(
        measures.queries,
        oracle,
        plan.phase_rho["iproj.measure"],
        label="requirements",
        releases=measures.releases,
        scales=scales,
    )
    tick(1)
    spec = getattr(plan, "spec", None)
    rows = getattr(spec.model.synthesizer, "rows", None) if spec is not None else None
    result = iproject(table, measurement, seed=seed, rows=rows)
    tick(2)
    acceptance = acceptance_report(
        plan.requirements, result.table, oracle, plan.phase_rho.get("accept.test", 0.0), result,
        before=table, seed=seed,
    )  # fmt: skip
    tick(3)
    return PostprocessOutcome(result.table, result, tuple(acceptance))
