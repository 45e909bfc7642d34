"""The query IR every stage reads: the planner builds it, the measurement layer answers it on
private rows, the synthesizers and post-processing answer it on synthetic tables.

* :mod:`dpql.ir.queries`: the query classes, their cells and sensitivities (replace-one);
* :mod:`dpql.ir.exact`: exact, vectorised evaluation of queries on an encoded table;
* :mod:`dpql.ir.oracle`: the measurement-oracle protocol through which synthesizers learn about
  data (implemented by :mod:`dpql.data.measure`).
"""
