"""Algorithms by name. Each module has a frozen ``Config`` and ``make(config) -> Algorithm``."""

from __future__ import annotations

import dataclasses
import importlib
from types import ModuleType

from jaxrl_par.algos.base import Algorithm

# name -> (module, one-line description); modules import lazily
ALGORITHMS: dict[str, tuple[str, str]] = {
    "ppo": ("jaxrl_par.algos.ppo", "PPO: synchronous vectorised actors, clipped surrogate"),
    "dqn": ("jaxrl_par.algos.dqn",
            "DQN: serial replay learner, double/dueling/n-step/PER options"),
    "apex": ("jaxrl_par.algos.apex",
             "Ape-X: epsilon-ladder actors, prioritized replay, one learner"),
    "sac": ("jaxrl_par.algos.sac",
            "SAC: serial replay learner for continuous actions, twin critics, tuned entropy"),
    "ddpg": ("jaxrl_par.algos.ddpg",
             "DDPG: serial replay learner, deterministic actor, Gaussian or OU noise"),
    "td3": ("jaxrl_par.algos.td3",
            "TD3: DDPG with twin critics, target smoothing and delayed actor updates"),
    "impala": ("jaxrl_par.algos.impala",
               "IMPALA: actors with a lagged parameter copy, V-trace learner"),
    "a3c": ("jaxrl_par.algos.a3c", "A3C: asynchronous workers pushing n-step actor-critic "
            "gradients to a parameter server"),
    "gorila": ("jaxrl_par.algos.gorila", "Gorila: DQN bundles (actor, replay, learner) "
               "pushing gradients to a parameter server"),
    "a2c": ("jaxrl_par.algos.a2c",
            "A2C: A3C's synchronous form, one on-policy gradient per rollout"),
}

# The algorithms that take continuous (Box) actions, and those that take only those; all
# others take discrete actions only.
CONTINUOUS_ACTIONS = frozenset({"ppo", "impala", "sac", "a2c", "a3c", "ddpg", "td3"})
CONTINUOUS_ONLY = frozenset({"sac", "ddpg", "td3"})


def for_actions(discrete: bool) -> list[str]:
    """Names of the algorithms that can train on a discrete (or continuous) action space."""
    if discrete:
        return sorted(n for n in ALGORITHMS if n not in CONTINUOUS_ONLY)
    return sorted(n for n in ALGORITHMS if n in CONTINUOUS_ACTIONS)


def get(name: str) -> ModuleType:
    """The module of algorithm ``name`` (with ``Config`` and ``make``)."""
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; available: {sorted(ALGORITHMS)}")
    return importlib.import_module(ALGORITHMS[name][0])


def with_config_field(field: str) -> list[str]:
    """Names of the algorithms whose ``Config`` has ``field``, sorted: ``"axis_name"``
    those that run data parallel, ``"num_workers"`` those with asynchronous workers,
    ``"pipeline"`` those with an actor-learner runtime. Imports every algorithm."""
    return sorted(n for n in ALGORITHMS
                  if field in {f.name for f in dataclasses.fields(get(n).Config)})


def listed(names: list[str]) -> str:
    """``"a, b or c"``: algorithm names for an error message."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


__all__ = ["ALGORITHMS", "CONTINUOUS_ACTIONS", "CONTINUOUS_ONLY", "Algorithm", "for_actions", "get",
           "listed", "with_config_field"]
