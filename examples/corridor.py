"""Your own JAX environment, trained by every jaxrl_par algorithm and the CLI.

A gymnax-style environment (``reset_env``, ``step_env``, ``observation_space``,
``action_space``, ``default_params``) registered under an id. Importing this module
registers it, so from Python::

    import corridor  # noqa: F401  (registers "Corridor-v0")
    from jaxrl_par.algos import ppo
    from jaxrl_par.runner.training import train
    result = train(ppo.make(ppo.Config(env="Corridor-v0", total_timesteps=50_000)), [0, 1])

and from the command line (``--import`` imports a module before the env is looked up;
the current directory is on the import path)::

    cd examples && jaxrl-par train ppo --env Corridor-v0 --import corridor --total-timesteps 5e4
    jaxrl-par compare ppo dqn impala --env Corridor-v0 --import examples.corridor --seeds 4

The corridor: cells ``0 .. length-1``; an episode starts in a random cell of
``1 .. length-2``; action 0 steps left, 1 right. Reaching the right end pays +1 and
ends the episode (terminated); every other step costs ``step_cost``; after
``max_steps_in_episode`` steps the episode is cut (truncated: the learners bootstrap
from the last observation, as for gymnax's own time limits). From cell ``s`` the best
return is ``1 - step_cost * (length - 2 - s)``; the left end is a wall.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

from jaxrl_par import envs


@struct.dataclass
class CorridorState(environment.EnvState):  # gymnax's EnvState holds `time`
    position: jax.Array  # int32 cell


@struct.dataclass
class CorridorParams(environment.EnvParams):
    length: int = 8
    step_cost: float = 0.05
    max_steps_in_episode: int = 20  # the time limit: truncation after this many steps


class Corridor(environment.Environment):
    @property
    def default_params(self) -> CorridorParams:
        return CorridorParams()

    def reset_env(self, key, params):
        position = jax.random.randint(key, (), 1, params.length - 1)
        state = CorridorState(time=0, position=position)
        return self.get_obs(state, params), state

    def step_env(self, key, state, action, params):
        position = jnp.clip(state.position + 2 * action - 1, 0, params.length - 1)
        state = CorridorState(time=state.time + 1, position=position)
        terminated = position == params.length - 1
        reward = jnp.where(terminated, 1.0, -params.step_cost)
        return self.get_obs(state, params), state, reward, terminated, {}

    def get_obs(self, state, params=None):
        params = params or self.default_params
        return jnp.array([state.position / (params.length - 1)], jnp.float32)

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params=None):
        return spaces.Box(0.0, 1.0, (1,), jnp.float32)

    @property
    def name(self) -> str:
        return "Corridor-v0"

    @property
    def num_actions(self) -> int:
        return 2


def _make():
    env = Corridor()
    return env, env.default_params


if "Corridor-v0" not in envs.list_envs():  # a second import registers nothing
    envs.register("Corridor-v0", _make)
