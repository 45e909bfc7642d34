"""The one place DP noise is drawn (DESIGN invariant 4: noise is not reproducible or invertible).

Every mechanism in :mod:`dpql.privacy.mechanisms` and the DP-SGD loops of the GAN backend take a
:class:`NoiseSource` argument instead of drawing their own randomness, so a reviewer can check one
file to know where privacy-relevant randomness comes from.

Randomness. A production source reads every random bit from the operating system's CSPRNG
(``os.urandom``); nothing is seeded, so there is no seed to leak. ``repr`` is constant and a
source refuses to be pickled or copied. :meth:`NoiseSource.for_testing` builds a *seeded* source
for tests only (``reproducible = True``); the compile path refuses it.

Exact discrete Gaussian. :meth:`NoiseSource.discrete_gaussian` draws integers from
``N_Z(0, sigma^2)``, ``P(y) ∝ exp(-y^2 / (2 sigma^2))`` (Canonne, Kamath & Steinke 2020, "The
Discrete Gaussian for Differential Privacy", Algorithm 3): a discrete Laplace candidate
``P(y) ∝ q^|y|``, ``q = exp(-1/t)``, ``t = floor(sigma) + 1`` -- a uniform sign and a geometric
magnitude ``P(G = k) = (1 - q) q^k``, "-0" rejected (CKS Algorithm 2) -- accepted with
probability ``exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2))``. Every random decision is a comparison
of a uniform ``U`` with a threshold ``p = exp(-x)`` (``G = k`` iff ``q^(k+1) < 1 - U <= q^k``),
and each is made
*exactly*: the first 31 (or 53) bits of ``U`` fix an interval, the threshold is computed in
float64 and widened by a relative ``2^-40`` (libm's ``exp``/``log`` are within a few ulp,
``2^-50``), and only when the two intervals overlap -- probability about ``2^-30`` per draw --
is the decision settled by :func:`_exact_below`, which draws further bits of ``U`` and brackets
``p`` with Python's correctly rounded ``decimal.Decimal.exp`` at growing precision from the exact
rational ``x``. So the output distribution is exactly ``N_Z(0, sigma^2)`` for the double ``sigma``
given (``sigma^2`` taken as the exact rational square of that double), with no floating-point
artefact to invert: a published ``sum + Y`` is an integer, a function of ``Y`` alone.

Gumbel noise (the exponential mechanism, which releases indices only) is ``-log(-log U)`` of
53-bit uniforms from the same source.

JAX keys. :meth:`NoiseSource.jax_key` hands DP-SGD a 128-bit key of JAX's ``rbg`` PRNG (four
32-bit words from the source). The key determines all noise derived from it: treat it as a
secret, pass it only into the jitted loop that draws DP noise, never log or return it.
"""

from __future__ import annotations

import decimal
import math
import os
from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING, NoReturn

import numpy as np

if TYPE_CHECKING:
    import jax

Shape = int | tuple[int, ...]

# Relative half-width by which a float64 threshold exp(-x) is widened before a decision is taken
# on it: far above libm's error (a few ulp, ~2^-50) and the rounding of x itself.
_THRESHOLD_SLACK = 2.0**-40
# Uniform bits drawn for the fast path: 31 (with a sign bit, one 32-bit word) while the
# decisions they settle are coarse at that resolution (t small); 53 (a double's mantissa) for
# large t.
_WIDE_T = 2**16


class NoiseSource:
    """A generator of DP noise. Construct with ``NoiseSource()`` (OS CSPRNG) in production."""

    __slots__ = ("_bytes", "reproducible")

    def __init__(self) -> None:
        self._bytes: Callable[[int], bytes] = os.urandom
        self.reproducible = False

    @classmethod
    def for_testing(cls, seed: int) -> NoiseSource:
        """A seeded, reproducible source for tests. Never use it for a release: the compile path
        refuses any source with ``reproducible`` set."""
        source = cls.__new__(cls)
        generator = np.random.Generator(np.random.PCG64DXSM(np.random.SeedSequence(seed)))
        source._bytes = generator.bytes
        source.reproducible = True
        return source

    # ---------------------------------------------------------------------------- raw bits

    def words(self, size: int, bits: int = 32) -> np.ndarray:
        """``size`` independent uniform integers of ``bits`` (<= 64) bits, as uint64."""
        if bits <= 32:
            raw32 = np.frombuffer(self._bytes(4 * size), dtype=np.uint32).astype(np.uint64)
            return raw32 >> np.uint64(32 - bits)
        raw = np.frombuffer(self._bytes(8 * size), dtype=np.uint64)
        return raw >> np.uint64(64 - bits) if bits < 64 else raw.copy()

    def randbits(self, bits: int) -> int:
        """One uniform Python integer of ``bits`` bits."""
        return int.from_bytes(self._bytes((bits + 7) // 8), "big") >> (-bits % 8)

    # ---------------------------------------------------------------------------- samplers

    def discrete_gaussian(self, sigma: float, size: int) -> np.ndarray:
        """``size`` i.i.d. draws of the discrete Gaussian ``N_Z(0, sigma^2)`` as int64 (exact;
        see the module docstring). ``sigma`` must be finite, > 0 and < 2^46."""
        _check_scale("sigma", sigma)
        if sigma >= 2.0**46:
            raise ValueError(f"discrete Gaussian sigma must be < 2^46, got {sigma!r}")
        sampler = _DiscreteGaussian(self, sigma)
        kept: list[np.ndarray] = []
        have = 0
        while have < size:
            # about 3/4 of candidates are kept at sigma >= 3 (fewer below): ask for a bit more
            # than is missing, so most calls need one or two rounds; surplus draws are dropped
            # (i.i.d., so keeping the first `size` is exact)
            y, accepted = sampler.attempt(int((size - have) * 1.4) + 16)
            kept.append(y[accepted])
            have += kept[-1].size
        return np.concatenate(kept)[:size] if kept else np.empty(0, dtype=np.int64)

    def gumbel(self, shape: Shape, scale: float) -> np.ndarray:
        """I.i.d. Gumbel(0, scale) float64 samples (CDF exp(-exp(-x/scale))), from 53-bit
        uniforms in (0, 1). Used only for Gumbel-max selection, whose output is an index."""
        _check_scale("scale", scale)
        n = int(np.prod(shape))
        u = (self.words(n, 53).astype(np.float64) + 0.5) * 2.0**-53
        return (-scale * np.log(-np.log(u))).reshape(shape)

    def jax_key(self) -> jax.Array:
        """A fresh 128-bit JAX key (``rbg`` implementation) whose bits come from this source.

        The key determines all noise derived from it: treat it as a secret, pass it only into
        the jitted loop that draws DP noise, never log or return it.
        """
        import jax

        bits = self.words(4, 32).astype(np.uint32)
        return jax.random.wrap_key_data(bits, impl="rbg")

    def __repr__(self) -> str:
        return "NoiseSource(reproducible=True, TEST ONLY)" if self.reproducible else "NoiseSource()"

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        # Pickling or copying would write a test source's generator state somewhere.
        raise TypeError("a NoiseSource cannot be pickled or copied: its state is secret")


def default_noise() -> NoiseSource:
    """A fresh source reading the OS CSPRNG (the only kind a release may use)."""
    return NoiseSource()


def _check_scale(name: str, value: float) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ValueError(f"noise {name} must be finite and > 0, got {value!r}")


# ------------------------------------------------------------------------------------------------
# The exact discrete Gaussian (CKS 2020, Algorithm 3 over a discrete Laplace of scale t)


class _DiscreteGaussian:
    """One vectorised attempt of CKS Algorithm 3 at a fixed ``sigma`` (exact decisions)."""

    def __init__(self, source: NoiseSource, sigma: float):
        self.source = source
        self.sigma2 = Fraction(sigma) ** 2  # the exact rational the distribution is defined by
        self.t = math.floor(sigma) + 1
        self.centre = self.sigma2 / self.t  # sigma^2 / t, exact
        self.sigma2_f = float(self.sigma2)
        self.centre_f = float(self.centre)
        self.bits = 31 if self.t <= _WIDE_T else 53

    def attempt(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        """``size`` candidates and whether each is accepted. A candidate is a discrete Laplace
        ``Y`` (``P(y) ∝ q^|y|``) drawn as a sign and a geometric magnitude, rejecting "-0"
        (CKS Algorithm 2's construction), then kept with the Gaussian-to-Laplace ratio."""
        negative, magnitude = self._signed_geometric(size)
        y = np.where(negative, -magnitude, magnitude)
        accepted = self._accept(y)
        accepted &= ~(negative & (magnitude == 0))
        return y, accepted

    def _uniforms(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        """Integer draws ``m`` and ``lo = m / 2^b``: ``U`` lies in ``[lo, lo + 2^-b)`` whatever
        its later bits (exact: b <= 53 bits fit a double)."""
        m = self.source.words(size, self.bits)
        return m, m.astype(np.float64) * 2.0**-self.bits

    def _signed_geometric(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        """A uniform sign and a geometric magnitude per candidate, from one word each: the
        lowest bit is the sign, the ``bits`` above it the geometric's uniform."""
        words = self.source.words(size, self.bits + 1)
        negative = (words & np.uint64(1)).astype(bool)
        return negative, self._geometric(words >> np.uint64(1))

    def _geometric(self, m: np.ndarray) -> np.ndarray:
        """``G`` with ``P(G = k) = (1 - q) q^k``, ``q = exp(-1/t)``: ``G = k`` iff
        ``q^(k+1) < V <= q^k``, i.e. ``G = floor(-t ln V)``, for ``V = 1 - U`` on (0, 1]."""
        t = self.t
        lo = m.astype(np.float64) * 2.0**-self.bits
        width = 2.0**-self.bits
        # V in (v_hi - width, v_hi] (v_hi exact); -t ln V spans [k_lo, k_lo + t width / v_lo).
        # k_lo <= t ln(2^bits) < 37 t, so one absolute slack covers log's relative error; V = 0
        # (m all ones) gives an infinite span and goes to the exact path.
        v_hi = 1.0 - lo
        k_lo = np.log(v_hi)
        k_lo *= -t
        with np.errstate(divide="ignore"):
            span = (t * width) / (v_hi - width)
        slack = _THRESHOLD_SLACK * max(37.0 * t, 1.0)
        k = np.floor(k_lo - slack)
        span += k_lo
        span += slack
        sure = np.floor(span, out=span) == k
        out = np.where(sure, k, 0.0).astype(np.int64)
        for i in np.flatnonzero(~sure):
            out[i] = self._geometric_exact(int(m[i]))
        return out

    def _geometric_exact(self, m: int) -> int:
        """The geometric ``k`` for ``V = 1 - U``, ``U`` starting with the bits ``m``."""
        u = _LazyUniform(self.source, m, self.bits)
        # G = k iff V <= q^k and not V <= q^(k+1), i.e. U >= 1 - q^k ... compare U against
        # 1 - q^k through V: V <= q^k  <=>  U >= 1 - q^k. Walk from a float estimate.
        v_mid = 1.0 - (m + 0.5) * 2.0**-self.bits
        k = max(0, math.floor(-self.t * math.log(v_mid))) if v_mid > 0 else 0
        while k > 0 and not u.v_at_most_exp(Fraction(k, self.t)):
            k -= 1
        while u.v_at_most_exp(Fraction(k + 1, self.t)):
            k += 1
        return k

    def _accept(self, y: np.ndarray) -> np.ndarray:
        """Bernoulli(exp(-(|y| - sigma^2/t)^2 / (2 sigma^2))) for each candidate, exactly."""
        size = y.size
        m, lo = self._uniforms(size)
        width = 2.0**-self.bits
        d = np.abs(y).astype(np.float64)
        d -= self.centre_f
        d *= d
        d *= -1.0 / (2.0 * self.sigma2_f)
        p = np.exp(d, out=d)
        # U in [lo, lo + width): certainly below p when lo + width <= p (1 - slack), certainly
        # not when lo >= p (1 + slack) + 2^-1000 (p underflowing to 0 means p < 2^-1000)
        below = lo <= p * (1.0 - _THRESHOLD_SLACK) - width
        above = lo >= p * (1.0 + _THRESHOLD_SLACK) + 2.0**-1000
        out = below.copy()
        for i in np.flatnonzero(~(below | above)):
            gamma = (abs(int(y[i])) - self.centre) ** 2 / (2 * self.sigma2)
            out[i] = _LazyUniform(self.source, int(m[i]), self.bits).u_below_exp(gamma)
        return out


class _LazyUniform:
    """A uniform ``U`` on [0, 1) of which the leading ``bits`` are known (``m``); further bits
    are drawn from the source only when a comparison needs them."""

    def __init__(self, source: NoiseSource, m: int, bits: int):
        self.source = source
        self.m = m
        self.bits = bits

    def _refine(self) -> None:
        self.m = (self.m << 64) | self.source.randbits(64)
        self.bits += 64

    def u_below_exp(self, x: Fraction) -> bool:
        """Exactly ``U < exp(-x)`` for a rational ``x >= 0``."""
        return _exact_below(self, x, lambda lo, hi, p_lo, p_hi: (hi <= p_lo, lo >= p_hi))

    def v_at_most_exp(self, x: Fraction) -> bool:
        """Exactly ``1 - U <= exp(-x)``, i.e. ``U >= 1 - exp(-x)``, for a rational ``x >= 0``."""
        return _exact_below(
            self, x, lambda lo, hi, p_lo, p_hi: (lo >= 1 - p_lo, hi <= 1 - p_hi)
        )


def _exact_below(
    u: _LazyUniform,
    x: Fraction,
    decide: Callable[[Fraction, Fraction, Fraction, Fraction], tuple[bool, bool]],
) -> bool:
    """Settle a comparison of ``U`` with ``p = exp(-x)`` exactly: ``decide(lo, hi, p_lo, p_hi)``
    returns (certainly true, certainly false) for ``U`` in ``[lo, hi)`` and ``p`` in
    ``[p_lo, p_hi]``; refine both until one holds. ``p`` is bracketed with ``decimal``'s
    correctly rounded ``exp`` (error <= 1/2 ulp) of ``x`` rounded down and up."""
    digits = 40
    while True:
        p_lo, p_hi = _exp_bracket(x, digits)
        lo = Fraction(u.m, 1 << u.bits)
        hi = Fraction(u.m + 1, 1 << u.bits)
        yes, no = decide(lo, hi, p_lo, p_hi)
        if yes:
            return True
        if no:
            return False
        u._refine()
        digits += 20


def _exp_bracket(x: Fraction, digits: int) -> tuple[Fraction, Fraction]:
    """Rationals ``p_lo <= exp(-x) <= p_hi``, about ``digits`` significant digits apart.

    ``x`` is rounded down and up to ``digits`` digits (directed rounding), and ``exp`` of each is
    correctly rounded (``decimal``: error <= 1/2 ulp <= 10^-(digits-1) relative); ``exp(-x)``
    is decreasing, so ``exp(-x_hi) <= exp(-x) <= exp(-x_lo)``."""
    num, den = decimal.Decimal(x.numerator), decimal.Decimal(x.denominator)
    x_lo = decimal.Context(prec=digits, rounding=decimal.ROUND_FLOOR).divide(num, den)
    x_hi = decimal.Context(prec=digits, rounding=decimal.ROUND_CEILING).divide(num, den)
    ctx = decimal.Context(prec=digits)
    e_lo, e_hi = (-x_hi).exp(ctx), (-x_lo).exp(ctx)
    ulp = Fraction(1, 10 ** (digits - 1))
    return Fraction(e_lo) * (1 - ulp), Fraction(e_hi) * (1 + ulp)
