"""The compile estimate is an upper bound on compile's peak memory.

Specs of the benchmark suite (benchmarks/suite/specs) are compiled small: their schema and
workload, a table drawn uniformly from the schema's public domain, tiny synthesizer options and
many output rows (the rows the writer, the sampler and post-processing hold dominate then). The
peak resident memory of the compile process, as the kernel reports it to its parent, must stay
below the plan's ``peak_memory_bytes``. The GAN's sampling pass, which the estimate once left
out, is compiled too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from dpql.spec.columns import CategoricalSpec
from dpql.spec.load import load_spec

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "benchmarks" / "suite" / "specs"
ROWS, OUTPUT_ROWS = 400, 200_000
RAP = "  method: rap\n  rows: {rows}\n  options: {{rounds: 1, relaxed_rows: 50, iterations: 10}}\n"
GAN = (
    "  method: gan\n  rows: {rows}\n  options: {{encoding: bins, ae_steps: 5, critic_steps: 5, "
    "critic_steps_per_generator_step: 5, finetune_steps: 5}}\n"
)


def _uniform_table(spec_path: Path, rows: int, out: Path) -> None:
    """``rows`` rows drawn uniformly from the spec's public schema (never from data)."""
    rng = np.random.default_rng(0)
    spec = load_spec(spec_path)
    cols = {}
    for name, col in spec.model.columns.items():
        if isinstance(col, CategoricalSpec):
            cols[name] = rng.choice(np.asarray(col.values, dtype=object), rows)
        else:
            x = rng.uniform(col.min, col.max, rows)
            cols[name] = np.rint(x).astype(np.int64) if col.integer else x
    pd.DataFrame(cols).to_csv(out, index=False)


def _small_spec(source: Path, folder: Path, synth: str) -> Path:
    text = source.read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    text = re.sub(r"\n  path: [^\n]*", "\n  path: data.csv", text, count=1)
    text = re.sub(r"\n  rows: \d+", f"\n  rows: {ROWS}", text, count=1)
    start, end = text.index("\nsynthesizer:\n"), text.index("\noutput:")
    text = text[:start] + "\nsynthesizer:\n" + synth.format(rows=OUTPUT_ROWS) + text[end:]
    text = re.sub(r"\noutput:\n(  .*\n?)+", "\noutput:\n  path: out/t.csv\n  provenance: "
                  "out/t.provenance.json\n", text)  # fmt: skip
    text = re.sub(r"\n  delta: [^\n]*", "\n  delta: 1e-9", text, count=1)
    text += "\nmissing: drop\n"  # the GAN encodes no missing state; the drawn table has none
    assert data["data"]["rows"] > 0
    spec = folder / f"{source.stem}.yaml"
    spec.write_text(text, encoding="utf-8")
    return spec


# A forked child's peak RSS counts the parent's pages until it execs, so a compile started from
# the test process (large after many tests) would report the test's size: a small Python process
# starts the compile and reports its grandchild's peak instead.
_WRAPPER = """
import os, subprocess, sys
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(proc.pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024)
"""


def _peak_of_compile(spec: Path) -> int:
    """Peak RSS (bytes) of one ``dpql compile`` process, from the kernel's rusage of it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "dpql.cli", "compile", str(spec), "--quiet", "--seed", "0"]
    log = spec.with_suffix(".log")
    with log.open("wb") as f:
        done = subprocess.run(
            [sys.executable, "-c", _WRAPPER, *cmd], env=env, stdout=subprocess.PIPE, stderr=f
        )
    code, peak = (int(x) for x in done.stdout.split())
    assert done.returncode == 0 and code == 0, log.read_text()[-2000:]
    return peak


def _estimate(spec: Path) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "dpql.cli", "plan", str(spec), "--format", "json"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return int(json.loads(done.stdout)["resources"]["peak_memory_bytes"])


# the suite's smallest and largest domains (bn1k: 11 columns, adult: 15 columns),
# and the GAN's sampling pass; each compile takes seconds of CPU
CASES = [(SUITE / f"{name}.release.yaml", RAP) for name in ("bn1k", "adult")]
CASES.append((SUITE / "bn1k.release.yaml", GAN))


@pytest.mark.parametrize(
    ("source", "synth"), CASES, ids=[f"{p.stem.split('.')[0]}-{s.split()[1]}" for p, s in CASES]
)
def test_the_estimate_bounds_the_peak_of_a_small_compile(
    source: Path, synth: str, tmp_path: Path
) -> None:
    spec = _small_spec(source, tmp_path, synth)
    _uniform_table(spec, ROWS, tmp_path / "data.csv")
    estimate = _estimate(spec)
    peak = _peak_of_compile(spec)
    assert peak <= estimate, (
        f"{source.name}: compile peaked at {peak / 2**20:.0f} MiB, over the plan's estimate "
        f"of {estimate / 2**20:.0f} MiB"
    )
