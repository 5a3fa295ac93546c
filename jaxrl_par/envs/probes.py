"""Probe environments: tiny MDPs whose optimal values and policies are known.

Each isolates one thing a learner can get wrong (after Andy Jones, "Debugging RL,
without the agonizing pain"). A learner that fails a probe has a bug, not bad luck.

| id                 | actions | obs        | reward              | episode  | tests              |
|--------------------|---------|------------|---------------------|----------|--------------------|
| ProbeConstant-v0   | 1       | 0          | +1                  | 1 step   | value fitting      |
| ProbeObsReward-v0  | 1       | +-1 random | = obs               | 1 step   | obs-based value    |
| ProbeDiscount-v0   | 1       | 0 then 1   | +1 at the 2nd step  | 2 steps  | discounting (V0=g) |
| ProbeAction-v0     | 2       | 0          | +1 if a = 1 else -1 | 1 step   | policy improvement |
| ProbeObsAction-v0  | 2       | +-1 random | +1 if a matches obs | 1 step   | obs-based policy   |
| ProbeTimeLimit-v0  | 1       | 0          | +1                  | cut at T | trunc. bootstrap   |
| ProbeContinuous-v0 | [-1, 1] | 0          | -(a - 0.5)^2        | 1 step   | Gaussian policies  |

``ProbeTimeLimit-v0`` never terminates, so with correct truncation bootstrapping every
state has value ``1 / (1 - gamma)``; a learner that treats the time limit as terminal
learns less.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces


@struct.dataclass
class ProbeState(environment.EnvState):
    time: jax.Array  # int32 steps taken
    sign: jax.Array  # float32 in {-1, +1}: the observation of obs-dependent probes


@struct.dataclass
class ProbeParams(environment.EnvParams):
    max_steps_in_episode: int = 1_000_000


@struct.dataclass
class TimeLimitParams(environment.EnvParams):
    max_steps_in_episode: int = 10


class _Probe(environment.Environment):
    """Shared plumbing: one float observation, a sign drawn at reset."""

    num_steps: int = 1  # steps to termination; 0 = never terminates
    n_actions: int = 1
    random_sign: bool = False

    @property
    def default_params(self) -> environment.EnvParams:
        return ProbeParams()

    def reset_env(self, key, params):
        sign = jnp.where(jax.random.bernoulli(key), 1.0, -1.0) if self.random_sign else 0.0
        state = ProbeState(time=jnp.int32(0), sign=jnp.float32(sign))
        return self._obs(state), state

    def _obs(self, state):
        return jnp.array([state.sign], jnp.float32)

    def _reward(self, state, action):
        raise NotImplementedError

    def step_env(self, key, state, action, params):
        reward = self._reward(state, action)
        state = state.replace(time=state.time + 1)
        terminated = (state.time >= self.num_steps) if self.num_steps else jnp.bool_(False)
        return self._obs(state), state, jnp.float32(reward), terminated, {}

    def is_terminated(self, state, params):
        return (state.time >= self.num_steps) if self.num_steps else jnp.bool_(False)

    @property
    def num_actions(self) -> int:
        return self.n_actions

    def action_space(self, params=None):
        return spaces.Discrete(self.n_actions)

    def observation_space(self, params=None):
        return spaces.Box(-1.0, 1.0, (1,), jnp.float32)


class ProbeConstant(_Probe):
    def _reward(self, state, action):
        return 1.0


class ProbeObsReward(_Probe):
    random_sign = True

    def _reward(self, state, action):
        return state.sign


class ProbeDiscount(_Probe):
    num_steps = 2

    def _obs(self, state):
        return jnp.array([state.time], jnp.float32)

    def _reward(self, state, action):
        return jnp.where(state.time == 1, 1.0, 0.0)


class ProbeAction(_Probe):
    n_actions = 2

    def _reward(self, state, action):
        return jnp.where(action == 1, 1.0, -1.0)


class ProbeObsAction(_Probe):
    n_actions = 2
    random_sign = True

    def _reward(self, state, action):
        return jnp.where((action == 1) == (state.sign > 0), 1.0, -1.0)


class ProbeTimeLimit(_Probe):
    num_steps = 0

    @property
    def default_params(self) -> environment.EnvParams:
        return TimeLimitParams()

    def _reward(self, state, action):
        return 1.0


class ProbeContinuous(_Probe):
    def _reward(self, state, action):
        return -jnp.sum((action - 0.5) ** 2)

    def action_space(self, params=None):
        return spaces.Box(-1.0, 1.0, (1,), jnp.float32)

    @property
    def num_actions(self) -> int:
        return 1


PROBES = {
    "ProbeConstant-v0": ProbeConstant,
    "ProbeObsReward-v0": ProbeObsReward,
    "ProbeDiscount-v0": ProbeDiscount,
    "ProbeAction-v0": ProbeAction,
    "ProbeObsAction-v0": ProbeObsAction,
    "ProbeTimeLimit-v0": ProbeTimeLimit,
    "ProbeContinuous-v0": ProbeContinuous,
}
