"""The three networks of DP-auto-GAN as pure JAX functions on parameter pytrees.

Architectures are the paper's ADULT serialisation (Tantipongpipat et al. 2019, App. E.1):

* autoencoder ``n -> h -> d -> h -> n``, LeakyReLU(0.2) on hidden layers; the decoder returns
  *logits* (the paper's final Sigmoid is applied by the loss, a BCE from logits that stays
  finite where a saturated sigmoid would not, and at decoding);
* generator ``z -> G(z)`` in latent space: two residual blocks ``x + leaky(norm(W x))`` (no bias,
  width = noise dim, LayerNorm as in the authors' code), then a projection to the latent dim;
* critic ``n -> h1 -> h2 -> 1`` with LeakyReLU(0.2) and a linear (unbounded WGAN) output.

One deliberate change: the latent space is the cube (-1, 1)^d, with tanh on the encoder output
and on the generator's last layer (the paper's MIMIC architecture, App. D), instead of ADULT's
LeakyReLU on both. Trained privately at the paper's learning rate, unbounded LeakyReLU codes
drift far from the origin, where the LayerNorm generator cannot follow in a few thousand steps;
a bounded latent cube keeps the codes where the generator can reach them.

Initialisation is PyTorch's default ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` for weights and
biases (the paper's networks are PyTorch modules, App. E.1), for fidelity with the paper's
clip norms.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

Params = dict[str, list[dict[str, jax.Array]]]


def _linear(key: jax.Array, fan_in: int, fan_out: int, bias: bool = True) -> dict[str, jax.Array]:
    bound = 1.0 / jnp.sqrt(fan_in)
    kw, kb = jax.random.split(key)
    layer = {"w": jax.random.uniform(kw, (fan_in, fan_out), minval=-bound, maxval=bound)}
    if bias:
        layer["b"] = jax.random.uniform(kb, (fan_out,), minval=-bound, maxval=bound)
    return layer


def _mlp(key: jax.Array, sizes: Sequence[int]) -> list[dict[str, jax.Array]]:
    keys = jax.random.split(key, len(sizes) - 1)
    return [_linear(k, a, b) for k, a, b in zip(keys, sizes[:-1], sizes[1:], strict=True)]


def _leaky(x: jax.Array) -> jax.Array:
    return jax.nn.leaky_relu(x, 0.2)


def _mlp_apply(layers: list[dict[str, jax.Array]], x: jax.Array) -> jax.Array:
    """LeakyReLU(0.2) between layers, none after the last."""
    for i, layer in enumerate(layers):
        x = x @ layer["w"] + layer["b"]
        if i < len(layers) - 1:
            x = _leaky(x)
    return x


def autoencoder_init(key: jax.Array, n: int, hidden: int, latent: int) -> Params:
    ke, kd = jax.random.split(key)
    return {"encoder": _mlp(ke, (n, hidden, latent)), "decoder": _mlp(kd, (latent, hidden, n))}


def encode(params: Params, x: jax.Array) -> jax.Array:
    """Latent code in (-1, 1)^d (tanh output, see the module docstring)."""
    return jnp.tanh(_mlp_apply(params["encoder"], x))


def decode_logits(params: Params, latent: jax.Array) -> jax.Array:
    """Decoder logits; ``jax.nn.sigmoid`` of them is the decoded record in [0, 1]^n."""
    return _mlp_apply(params["decoder"], latent)


def generator_init(key: jax.Array, noise_dim: int, latent: int, layer_norm: bool) -> Params:
    keys = jax.random.split(key, 3)
    sizes = ((noise_dim, noise_dim), (noise_dim, noise_dim), (noise_dim, latent))
    blocks = []
    for i, (k, (a, b)) in enumerate(zip(keys, sizes, strict=True)):
        block = _linear(k, a, b, bias=i == 2)
        if layer_norm and i < 2:
            block |= {"scale": jnp.ones((b,)), "shift": jnp.zeros((b,))}
        blocks.append(block)
    return {"blocks": blocks}


def generate_latent(params: Params, z: jax.Array) -> jax.Array:
    """``G(z)``: two residual blocks, then a tanh projection onto the latent cube (-1, 1)^d."""
    x = z
    for i, block in enumerate(params["blocks"]):
        h = x @ block["w"] + block.get("b", 0.0)
        if "scale" in block:  # LayerNorm (the authors' code; the paper prints BatchNorm1d)
            mean = jnp.mean(h, axis=-1, keepdims=True)
            var = jnp.var(h, axis=-1, keepdims=True)
            h = (h - mean) / jnp.sqrt(var + 1e-5) * block["scale"] + block["shift"]
        if i < len(params["blocks"]) - 1:
            x = _leaky(h) + x
        else:
            x = jnp.tanh(h)
    return x


def critic_init(key: jax.Array, n: int, hidden: Sequence[int]) -> Params:
    return {"layers": _mlp(key, (n, *hidden, 1))}


def critic(params: Params, x: jax.Array) -> jax.Array:
    """WGAN critic score of each row (linear output, no sigmoid)."""
    return _mlp_apply(params["layers"], x)[..., 0]
