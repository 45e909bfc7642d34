"""The one place DP noise is drawn (DESIGN invariant 4: noise is not reproducible by outsiders).

Every mechanism in :mod:`dpql.privacy.mechanisms` and the DP-SGD loops of the GAN backend take a
:class:`NoiseSource` argument instead of drawing their own randomness, so a reviewer can check one
file to know where privacy-relevant randomness comes from.

* A production source wraps ``numpy.random.Generator(PCG64DXSM(SeedSequence()))``: the
  ``SeedSequence`` draws 128 bits from OS entropy. dpql keeps no reference to that entropy,
  exposes no seed attribute, prints nothing about it (``repr`` is constant) and refuses to pickle
  or copy a source, so the seed cannot reach a checkpoint, log, plan or provenance record.
  (The bit generator's live state is in process memory, as it must be; it is never written out.)
* :meth:`NoiseSource.for_testing` builds a *seeded* source for tests only. Its instances carry
  ``reproducible = True``; the compile path must refuse such a source, because noise an outsider can
  regenerate from a known seed gives no privacy.
* :meth:`NoiseSource.jax_key` hands a JAX PRNG key to jitted loops (DP-SGD). JAX's default PRNG
  (threefry2x32) is counter-based: all noise drawn from the key is a deterministic function of its
  64 key bits, so the key is secret material exactly like a seed and must never be output.

Limitation: samples are IEEE doubles from NumPy's ziggurat/inversion samplers, not exact discrete
samplers (cf. Canonne, Kamath & Steinke 2020, "The Discrete Gaussian for Differential Privacy");
floating-point artefacts are not defended against.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NoReturn

import numpy as np

if TYPE_CHECKING:
    import jax

Shape = int | tuple[int, ...]


class NoiseSource:
    """A generator of DP noise. Construct with ``NoiseSource()`` (OS entropy) in production."""

    __slots__ = ("_generator", "reproducible")

    def __init__(self) -> None:
        self._generator = np.random.Generator(np.random.PCG64DXSM(np.random.SeedSequence()))
        self.reproducible = False

    @classmethod
    def for_testing(cls, seed: int) -> NoiseSource:
        """A seeded, reproducible source for tests. Never use it for a release: the compile path
        refuses any source with ``reproducible`` set."""
        source = cls.__new__(cls)
        source._generator = np.random.Generator(np.random.PCG64DXSM(np.random.SeedSequence(seed)))
        source.reproducible = True
        return source

    def gaussian(self, shape: Shape, sigma: float) -> np.ndarray:
        """I.i.d. N(0, sigma^2) float64 samples of the given shape."""
        _check_scale("sigma", sigma)
        return self._generator.normal(0.0, sigma, size=shape)

    def gumbel(self, shape: Shape, scale: float) -> np.ndarray:
        """I.i.d. standard-location Gumbel(0, scale) float64 samples (CDF exp(-exp(-x/scale)))."""
        _check_scale("scale", scale)
        return self._generator.gumbel(0.0, scale, size=shape)

    def jax_key(self) -> jax.Array:
        """A fresh threefry2x32 JAX key whose 64 bits are drawn from this source.

        The key determines all noise derived from it (threefry is counter-based): treat it as a
        secret, pass it only into the jitted loop that draws DP noise, never log or return it.
        """
        import jax

        bits = self._generator.integers(0, 2**32, size=2, dtype=np.uint32)
        return jax.random.wrap_key_data(bits, impl="threefry2x32")

    def __repr__(self) -> str:
        return "NoiseSource(reproducible=True, TEST ONLY)" if self.reproducible else "NoiseSource()"

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        # Pickling or copying would write the generator state (equivalent to the seed) somewhere.
        raise TypeError("a NoiseSource cannot be pickled or copied: its state is secret")


def default_noise() -> NoiseSource:
    """A fresh source seeded from OS entropy (the only kind a release may use)."""
    return NoiseSource()


def _check_scale(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"noise {name} must be finite and > 0, got {value!r}")
