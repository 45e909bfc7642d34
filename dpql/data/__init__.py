"""The privacy boundary: the only code (with DP-SGD) that reads private rows.

* :mod:`dpql.data.codec`: the public encoding of tables (cell rules, decoding, the curator log);
* :mod:`dpql.data.load`: the data file (CSV, gzip CSV, Parquet) into the public encoding;
* :mod:`dpql.data.engines`: exact sums of IR queries (in memory, DuckDB, Spark);
* :mod:`dpql.data.sql`, :mod:`dpql.data.query_sql`: the encoding and the queries as SQL for
  the out-of-core engines;
* :mod:`dpql.data.measure`: :class:`~dpql.data.measure.PrivateMeasurer`, the
  :class:`~dpql.ir.oracle.MeasurementOracle` whose outputs are all mechanism outputs;
* :mod:`dpql.data.rows`: the encoded rows for DP-SGD (in memory, or an out-of-core row store
  addressed by row number for large files), its only other consumer.

Nothing computed here leaves except through a mechanism in :mod:`dpql.privacy.mechanisms`; the
curator log (true row count, clip counts, file hash) is for the curator only.
"""
