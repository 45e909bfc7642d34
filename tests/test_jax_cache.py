"""JAX's persistent compilation cache: on by default in the user's cache directory, off by flag."""

from __future__ import annotations

from pathlib import Path

from dpql.synth.jax_cache import cache_dir, enable_compilation_cache


def test_cache_dir_follows_the_environment(tmp_path):
    home = Path.home()
    assert cache_dir({}) == home / ".cache" / "dpql" / "jax"
    assert cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "dpql" / "jax"
    assert cache_dir({"DPQL_JAX_CACHE_DIR": str(tmp_path / "x")}) == tmp_path / "x"
    assert cache_dir({"DPQL_NO_JAX_CACHE": "1", "DPQL_JAX_CACHE_DIR": "/x"}) is None
    assert cache_dir({"DPQL_NO_JAX_CACHE": "0"}) == home / ".cache" / "dpql" / "jax"


def test_enable_sets_jax_config_once_and_keeps_a_users_setting(tmp_path, monkeypatch):
    import jax

    before = jax.config.jax_compilation_cache_dir
    try:
        jax.config.update("jax_compilation_cache_dir", None)
        monkeypatch.setenv("DPQL_NO_JAX_CACHE", "1")
        assert enable_compilation_cache() is None and not jax.config.jax_compilation_cache_dir
        monkeypatch.delenv("DPQL_NO_JAX_CACHE")
        monkeypatch.setenv("DPQL_JAX_CACHE_DIR", str(tmp_path / "c"))
        assert enable_compilation_cache() == tmp_path / "c"
        assert (tmp_path / "c").is_dir() and (tmp_path / "c").stat().st_mode & 0o077 == 0
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "c")
        monkeypatch.setenv("DPQL_JAX_CACHE_DIR", str(tmp_path / "other"))
        assert enable_compilation_cache() == tmp_path / "c"  # a directory already set is kept
    finally:
        jax.config.update("jax_compilation_cache_dir", before)


def test_compile_flag_turns_the_cache_off(tmp_path, monkeypatch):
    """``dpql compile --no-compile-cache`` sets the switch the synthesizers read, before any
    spec is read (here the spec is missing: the compile fails, the switch is set)."""
    from dpql.cli import main

    monkeypatch.delenv("DPQL_NO_JAX_CACHE", raising=False)
    assert main(["compile", str(tmp_path / "missing.yaml"), "--no-compile-cache"]) == 1
    assert cache_dir() is None
    monkeypatch.delenv("DPQL_NO_JAX_CACHE")
    assert main(["compile", str(tmp_path / "missing.yaml")]) == 1
    assert cache_dir() is not None
