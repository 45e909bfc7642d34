"""``python -m dpql.diagnostics_registry [--check]``: regenerate docs/diagnostics.md's tables."""

from dpql.diagnostics_registry import main

raise SystemExit(main())
