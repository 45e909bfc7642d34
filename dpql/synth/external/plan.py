"""The external backend's plan: one ``external`` budget line (its epsilon is declared)."""

from __future__ import annotations

from typing import Any

from dpql.privacy.budget import BudgetLine
from dpql.synth.base import PlanContext, SynthPlan


def plan(ctx: PlanContext, options: Any = None) -> SynthPlan:
    """The one line of the declared budget; no options, no cost beyond post-processing's."""
    return SynthPlan("external", (BudgetLine("external", "external", 1, None),), None)
