"""DP-auto-GAN synthesizer (Tantipongpipat et al. 2019).

**Privacy boundary.** This package is the ONLY synthesizer code that touches private rows: its
DP-SGD loops (:mod:`.dpsgd`, driven by :func:`train_gan`) read the private
:class:`~dpql.domain.EncodedTable` handed over by the pipeline. Every other synthesizer fits to
noisy measurements only. It never imports :mod:`dpql.data`; it receives rows, a
:class:`~dpql.privacy.noise.NoiseSource` and a :class:`~dpql.privacy.ledger.Ledger`.

Pipeline use::

    options = GanOptions.from_mapping(spec.synthesizer.options)     # validates, no data
    plan = plan_gan(options, n_public, budget, split)                # calibrates noise, no data
    model = train_gan(private_rows, plan, noise=noise, ledger=ledger, progress=callback,
                      marginals=noisy)         # optional: DP marginals to fit
    table = sample(model, rows, seed)                                # post-processing

With ``encoding: bins`` and DP-measured marginals (the backend's ``gan.marginals`` phase) the
generator is also fitted to them (:mod:`.fidelity`): a penalty on its WGAN loss, then
non-private fine-tuning of generator and decoder, and sampling draws each column's code.

Privacy accounting: two Poisson-subsampled Gaussian phases (autoencoder, critic), appended to
the ledger as ``dpsgd`` events and composed by :mod:`dpql.privacy.accountant` under dpql's
replace-one relation (see that module for the add/remove -> replace-one bound).
"""

from typing import Any

from dpql.synth.gan.options import GanOptions
from dpql.synth.gan.plan import GanPlan, plan_gan

__all__ = ["GanModel", "GanOptions", "GanPlan", "plan_gan", "sample", "train_gan"]


def __getattr__(name: str) -> Any:
    # the training program imports JAX: load it only when asked, so planning stays JAX-free
    if name in ("GanModel", "sample", "train_gan"):
        from dpql.synth.gan import train

        return getattr(train, name)
    if name in ("dpsgd", "encoding", "fidelity", "nets", "train"):
        import importlib

        return importlib.import_module(f"dpql.synth.gan.{name}")
    raise AttributeError(name)
