"""Vectorised, auto-resetting JAX environments (gymnax, probes, our own)."""

from jaxrl_par.envs.core import EnvState, StepDraws, Timestep, VecEnv, episode_metrics
from jaxrl_par.envs.probes import PROBES
from jaxrl_par.envs.registry import (
    check_env_id,
    import_source,
    list_envs,
    make,
    observation_numbers,
    register,
    source_record,
    spec,
)

__all__ = [
    "PROBES",
    "EnvState",
    "StepDraws",
    "Timestep",
    "VecEnv",
    "check_env_id",
    "episode_metrics",
    "import_source",
    "list_envs",
    "make",
    "observation_numbers",
    "register",
    "source_record",
    "spec",
]
