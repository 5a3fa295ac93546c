"""A2C: the synchronous form of A3C (Mnih et al. 2016; OpenAI baselines' A2C).

One worker with all ``num_envs`` envs acts ``num_steps`` steps, computes the n-step
advantage actor-critic gradient at the parameters it acted with, and the server applies
it before the next rollout: A3C with ``num_workers=1`` (:mod:`jaxrl_par.algos.a3c`), so
every gradient is on-policy (staleness 0). Against A3C at the same env steps, it shows
what asynchrony costs or buys; against PPO, what reusing each batch for several epochs
of clipped updates does.
"""

from __future__ import annotations

from jaxrl_par.algos import a3c
from jaxrl_par.algos.base import Algorithm
from jaxrl_par.algos.fields import configclass


@configclass
class Config(a3c.Config):
    """A2C hyperparameters: A3C's with one worker of 8 envs acting 8 steps (the 64 env
    steps per gradient of A3C's default workers). The defaults solve CartPole-v1 within
    5e5 env steps."""

    num_workers: int = 1
    num_envs: int = 8
    num_steps: int = 8

    def __post_init__(self):
        super().__post_init__()
        if self.num_workers != 1:
            raise ValueError(f"a2c.Config.num_workers={self.num_workers}: A2C has one "
                             "synchronous worker; for several asynchronous ones use a3c")


def make(config: Config) -> Algorithm:
    """A2C's ``init``/``update``: A3C's with one worker."""
    return a3c.make(config)
