"""The released table's file: written in the format its name implies."""

from __future__ import annotations

import gzip
import io
from pathlib import Path
from typing import TYPE_CHECKING

from dpql.spec.checks import implied_format

if TYPE_CHECKING:
    import pandas as pd


def write_frame(df: pd.DataFrame, path: Path, name: str) -> None:
    """``df`` at ``path`` in the format the table's file ``name`` implies (checked at load,
    E110): Parquet, gzip CSV (with no name or time stamp in its header, so equal tables give
    equal bytes) or CSV."""
    if implied_format(name) == "parquet":
        df.to_parquet(path, index=False)
    elif name.lower().endswith(".gz"):
        with (
            open(path, "wb") as raw,
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as packed,
            io.TextIOWrapper(packed, encoding="utf-8", newline="") as text,
        ):
            df.to_csv(text, index=False)
    else:
        df.to_csv(path, index=False)
