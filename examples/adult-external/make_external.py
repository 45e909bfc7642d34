"""Make ``external_synthetic.csv.gz``: a deliberately poor, public-only "synthetic" table.

Every column is drawn independently and uniformly from its PUBLIC domain in the release spec
(numeric ``[min, max]``, rounded for integer columns; categorical ``values``). No private row is
read, so the table carries no information about the real data; it stands in for the output of
another synthesizer. Run from the repository root::

    python3 examples/adult-external/make_external.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dpql.domain import NumericColumn
from dpql.spec.load import load_spec

HERE = Path(__file__).resolve().parent
ROWS = 8000
SEED = 0


def public_uniform_table(rows: int, seed: int) -> pd.DataFrame:
    """Independent uniform columns over the spec's public domain."""
    domain = load_spec(HERE / "adult-external.release.yaml").domain
    rng = np.random.default_rng(seed)
    out: dict[str, object] = {}
    for col in domain:
        if isinstance(col, NumericColumn):
            v = rng.uniform(col.lo, col.hi, rows)
            out[col.name] = np.round(v).astype(int) if col.integer else v
        else:
            out[col.name] = rng.choice(np.asarray(col.values, dtype=object), rows)
    return pd.DataFrame(out)


if __name__ == "__main__":
    path = HERE / "external_synthetic.csv.gz"
    public_uniform_table(ROWS, SEED).to_csv(path, index=False)
    print(f"wrote {path} ({path.stat().st_size} bytes)")
