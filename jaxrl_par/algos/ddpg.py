"""DDPG, Deep Deterministic Policy Gradient (Lillicrap et al. 2015,
https://arxiv.org/abs/1509.02971): the serial replay paradigm for continuous actions with
a deterministic actor, one critic regressed on the target networks' bootstrap, the
actor following the critic's gradient in the action, Polyak-averaged targets, and
Gaussian or Ornstein-Uhlenbeck (``exploration="ou"``) exploration noise.

The algorithm is :mod:`jaxrl_par.algos.deterministic`'s, with DDPG's defaults: one
critic, no target policy smoothing, an actor step after every critic step.
"""

from __future__ import annotations

from jaxrl_par.algos import deterministic
from jaxrl_par.algos.deterministic import State, Transition, make
from jaxrl_par.algos.fields import configclass


@configclass
class Config(deterministic.Config):
    """DDPG hyperparameters: CleanRL's (learning rate 3e-4, batch 256, tau 0.005,
    Gaussian exploration of 0.1 half-widths), with 4 envs and rejax's 64-64 networks,
    on Pendulum-v1; ``exploration="ou"`` with ``exploration_noise=0.2`` gives the paper's
    Ornstein-Uhlenbeck noise (theta 0.15)."""

    total_timesteps: int = 50_000
    num_critics: int = 1
    policy_delay: int = 1
    target_noise: float = 0.0
    target_noise_clip: float = 0.0


__all__ = ["Config", "State", "Transition", "make"]
