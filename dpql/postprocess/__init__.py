"""dpql.postprocess: the stage after synthesis (runs on noisy measurements and public tables).

* :mod:`~dpql.postprocess.run`: ``run_postprocess``, the stage ``dpql compile`` calls;
* :mod:`~dpql.postprocess.allocation`: how a release's noise is spread over its measures;
* :mod:`~dpql.postprocess.iproj`: noise-aware I-projection and resampling (Wang et al. 2023);
* :mod:`~dpql.postprocess.accept`: the requirements' DP acceptance tests;
* :mod:`~dpql.postprocess.risk`: the excess-risk bound reported with a model requirement.

It reads private data only through a :class:`~dpql.ir.oracle.MeasurementOracle` (every answer
noisy and charged to the ledger); it never imports :mod:`dpql.data`.
"""
