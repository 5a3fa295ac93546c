"""Vectorised, auto-resetting JAX environments (gymnax, probes, our own)."""

from jaxrl_par.envs.core import EnvState, Timestep, VecEnv, episode_metrics
from jaxrl_par.envs.probes import PROBES
from jaxrl_par.envs.registry import check_env_id, list_envs, make, register

__all__ = [
    "EnvState",
    "PROBES",
    "Timestep",
    "VecEnv",
    "check_env_id",
    "episode_metrics",
    "list_envs",
    "make",
    "register",
]
