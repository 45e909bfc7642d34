"""JAX's persistent compilation cache, on by default for the synthesizers' programs.

A release compiles its JAX programs (DP-SGD loops, RAP++'s relaxed fit, mbi's mirror descent
for a clique structure) afresh in every new process; on 2 cores that is most of a small
release's time. With the cache, a program compiled once is read back from disk by later
releases whose programs have the same structure (the same spec re-run, CI, a benchmark sweep).

Where: ``$DPQL_JAX_CACHE_DIR``, else ``$XDG_CACHE_HOME/dpql/jax``, else ``~/.cache/dpql/jax``.
Off: ``DPQL_NO_JAX_CACHE=1``, or a cache directory set in JAX's own configuration (which is then
left as it is).

What the cache holds: compiled XLA executables, keyed by a hash of the program's lowered form
(its operations and the shapes and dtypes of its arguments), the compile options and the JAX
and backend versions. No private value reaches it. The synthesizers pass private rows and noise
keys (:mod:`dpql.synth.gan.train`) and noisy measurements (mbi's ``MarginalLossFn`` and
``LinearMeasurement`` carry them as traced pytree leaves) to jitted programs as arguments,
never as compile-time constants, so neither keys nor executables embed them. What the programs'
shapes do reveal is public: the domain, the options, the planned batch capacities, and the
cliques the DP selection chose (which the provenance record publishes). The cache directory is
created with mode 0700.
"""

from __future__ import annotations

import os
from pathlib import Path

#: programs that compile faster than this are not written (reading one back costs about as much)
MIN_COMPILE_SECS = 0.2


def cache_dir(environ: os._Environ[str] | dict[str, str] | None = None) -> Path | None:
    """The cache directory this process uses by default, or ``None`` when turned off."""
    env = os.environ if environ is None else environ
    if env.get("DPQL_NO_JAX_CACHE", "").strip() not in ("", "0"):
        return None
    if env.get("DPQL_JAX_CACHE_DIR"):
        return Path(env["DPQL_JAX_CACHE_DIR"]).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "dpql" / "jax"


def enable_compilation_cache() -> Path | None:
    """Turn JAX's persistent compilation cache on at :func:`cache_dir` (once per process) and
    return the directory in use; ``None`` when turned off or when the directory cannot be made
    (compilation then simply is not cached). A directory already set in JAX's configuration
    is kept."""
    import jax

    current = jax.config.jax_compilation_cache_dir
    if current:
        return Path(current)
    path = cache_dir()
    if path is None:
        return None
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return None
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECS)
    return path
