"""jaxrl_par: every way of parallelising RL, on the accelerator, in JAX.

Quick start::

    import jax
    from jaxrl_par import algos, train

    algo = algos.get("ppo").make(algos.get("ppo").Config(env="CartPole-v1"))
    result = train(algo, seeds=[0, 1, 2, 3])
"""

from jaxrl_par import algos, axes, envs, networks, replay, returns
from jaxrl_par.algos.base import Algorithm
from jaxrl_par.train import TrainResult, train

__version__ = "0.1.0"

__all__ = [
    "Algorithm",
    "TrainResult",
    "algos",
    "axes",
    "envs",
    "networks",
    "replay",
    "returns",
    "train",
]
