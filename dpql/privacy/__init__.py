"""dpql.privacy: the privacy layer (noise, mechanisms, ledger, accounting, budget arithmetic).

* :mod:`~dpql.privacy.noise`: ``NoiseSource``, the only place DP noise is drawn (OS entropy).
* :mod:`~dpql.privacy.mechanisms`: Gaussian mechanism and one-shot Gumbel top-k, in zCDP.
* :mod:`~dpql.privacy.ledger`: immutable ``PrivacyEvent`` values and the append-only ``Ledger``.
* :mod:`~dpql.privacy.accountant`: zCDP <-> (epsilon, delta), DP-SGD RDP, epsilon of a ledger.
* :mod:`~dpql.privacy.budget`: exact splitting of a rho budget and the planner's budget table.

Neighbouring relation everywhere: replace-one with the public row count n from the spec.
"""
