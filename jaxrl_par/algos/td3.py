"""TD3, Twin Delayed DDPG (Fujimoto et al. 2018, https://arxiv.org/abs/1802.09477): the
serial replay paradigm for continuous actions with a deterministic actor, twin critics
and the clipped double-Q target, target policy smoothing (clipped Gaussian noise on the
target actor's action) and delayed actor and target updates (one per two critic steps).

The algorithm is :mod:`jaxrl_par.algos.deterministic`'s, with TD3's defaults.
"""

from __future__ import annotations

from jaxrl_par.algos import deterministic
from jaxrl_par.algos.deterministic import State, Transition, make
from jaxrl_par.algos.fields import configclass


@configclass
class Config(deterministic.Config):
    """TD3 hyperparameters: CleanRL's and rejax's (learning rate 3e-4, batch 256, tau
    0.005, Gaussian exploration of 0.1 half-widths, target noise 0.2 clipped at 0.5,
    policy delay 2), with 4 envs and rejax's 64-64 networks, on Pendulum-v1."""

    num_critics: int = 2
    policy_delay: int = 2
    target_noise: float = 0.2
    target_noise_clip: float = 0.5


__all__ = ["Config", "State", "Transition", "make"]
