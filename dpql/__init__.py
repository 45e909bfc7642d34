"""dpql: a compiler for differentially private synthetic-data releases."""

__version__ = "0.1.0"
