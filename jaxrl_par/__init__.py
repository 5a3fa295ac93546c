"""jaxrl_par: every way of parallelising RL, on the accelerator, in JAX.

Quick start::

    from jaxrl_par import algos
    from jaxrl_par.train import train

    ppo = algos.get("ppo")
    result = train(ppo.make(ppo.Config(env="CartPole-v1")), seeds=[0, 1, 2, 3])

Submodules load on first use, so ``import jaxrl_par`` touches no device: a multi-host
run can still call ``jaxrl_par.parallel.initialize()`` (``jax.distributed.initialize``)
first. gymnax, imported by ``jaxrl_par.envs``, creates arrays when it is imported.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_SUBMODULES = ("activations", "algos", "axes", "envs", "evaluate", "layers", "microbatch",
               "networks", "parallel", "replay", "returns", "rng", "train")
_ATTRIBUTES = {
    "Algorithm": ("jaxrl_par.algos.base", "Algorithm"),
    "TrainResult": ("jaxrl_par.train", "TrainResult"),
}

__all__ = sorted(_SUBMODULES + tuple(_ATTRIBUTES))


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"jaxrl_par.{name}")
    if name in _ATTRIBUTES:
        module, attr = _ATTRIBUTES[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'jaxrl_par' has no attribute {name!r}")
