"""Platform-specific tuning, kept apart from the default code path.

The library's code is plain JAX, flax and optax; what is here changes how some of it is
lowered on one platform, never what it computes (up to float rounding) nor its
parameters, so a run can move between platforms and settings. Each piece is listed in
docs/performance.md with what it buys on a whole training run, measured against the
plain path.

* :mod:`~jaxrl_par.platform.conv`: convolutions as patch products on CPU (the MinAtar
  torso), where XLA:CPU's grouped convolutions under the runner's seed ``vmap`` are slow.
* :mod:`~jaxrl_par.platform.cpu_threads`: XLA:CPU's thread pool and CPU device count,
  chosen before jax starts (the CLI's ``--cpu-threads`` and ``--devices``).

One setting switches the lowering choices off, so both paths can be compared: the
environment variable ``JAXRL_PAR_PLATFORM_TUNING=off`` (default ``on``), read when a
network is traced (its parameters are the same either way).
"""

from __future__ import annotations

import os

#: The environment variable that switches platform tuning off (``off``) or on (``on``).
SETTING = "JAXRL_PAR_PLATFORM_TUNING"


def tuning() -> bool:
    """Whether platform tuning is on (``$JAXRL_PAR_PLATFORM_TUNING``, default ``on``)."""
    value = os.environ.get(SETTING, "on").strip().lower()
    if value not in ("on", "off"):
        raise ValueError(f"{SETTING}={value!r}: give on or off")
    return value == "on"


def conv_layer() -> type:
    """The convolution module networks use: :class:`jaxrl_par.platform.conv.Conv` with
    tuning on, ``flax.linen.Conv`` with it off (the same parameters and results)."""
    import flax.linen as nn

    if not tuning():
        return nn.Conv
    from jaxrl_par.platform.conv import Conv

    return Conv
