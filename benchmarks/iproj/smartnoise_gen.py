"""SmartNoise's DPCTGAN / PATECTGAN on Adult's public encoding, for ``table1_adult.py``.

The paper's GAN rows (Wang et al. 2023, Table 1) use SmartNoise's implementations with their
defaults. They need torch, so they run in their own environment, not dpql's:

    python -m venv /tmp/snenv && /tmp/snenv/bin/pip install smartnoise-synth packaging
    python benchmarks/iproj/table1_adult.py --export-codes /tmp/sn/adult_codes.npz
    /tmp/snenv/bin/python benchmarks/iproj/smartnoise_gen.py --method dpctgan --epsilon 1 \\
        --seed 0 --codes /tmp/sn/adult_codes.npz --out /tmp/sn
    python benchmarks/iproj/table1_adult.py --generators dpctgan --smartnoise /tmp/sn ...

Every column enters as categorical: the spec's public codes (numeric columns by their public
bins), as MST and AIM see them; ``table1_adult.py`` decodes the bins uniformly. No bounds are
inferred from data (``preprocessor_eps=0``). delta = 1e-9 as everywhere in the benchmark.
Writes ``{method}-eps{epsilon:g}-seed{seed}.npz`` with one int32 code array per column.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--method", choices=("dpctgan", "patectgan"), required=True)
    ap.add_argument("--epsilon", type=float, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--codes", type=Path, required=True, help="from table1_adult.py --export-codes")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()

    import pandas as pd
    import torch
    from snsynth import Synthesizer

    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    z = np.load(a.codes)
    df = pd.DataFrame({c: z[c] for c in z.files})
    t = time.perf_counter()
    synth = Synthesizer.create(a.method, epsilon=a.epsilon, delta=1e-9, verbose=True)
    synth.fit(df, categorical_columns=list(df.columns), preprocessor_eps=0.0)
    out = synth.sample(len(df))
    print(f"{a.method} epsilon {a.epsilon:g}: {time.perf_counter() - t:.0f} s", flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"{a.method}-eps{a.epsilon:g}-seed{a.seed}.npz"
    np.savez_compressed(path, **{c: out[c].to_numpy().astype(np.int32) for c in df.columns})


if __name__ == "__main__":
    main()
