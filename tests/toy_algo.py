"""A small real algorithm for the runner's tests: cheap to compile, stateful like PPO.

The runner (`jaxrl_par.runner.training`) knows algorithms only through `init`/`update`, so its
mechanics (chunking and masking, vmapped seeds, compiling once, reusing programs,
checkpoint and resume, the NaN check) are tested on this: REINFORCE with a linear
softmax policy on 4 CartPole envs, T = 4 steps per update, one Adam step. Its state has
every kind of leaf PPO's has (a PRNG key, env state, params, Adam moments, a counter) and
every update changes all of them, so a skipped, repeated or reordered update shows up.
It compiles in about a second where PPO takes five to ten.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl_par import envs
from jaxrl_par.algos.base import Algorithm


@dataclasses.dataclass(frozen=True)
class Config:
    env: str = "CartPole-v1"
    num_envs: int = 4
    num_steps: int = 4
    learning_rate: float = 0.05
    total_timesteps: int = 4 * 4 * 23  # 23 updates: a prime, so most chunkings mask


@struct.dataclass
class State:
    params: jax.Array  # [obs_dim, num_actions]
    opt_state: optax.OptState
    env_state: envs.EnvState
    rng: jax.Array
    update_count: jax.Array


def make(config: Config = Config()) -> Algorithm:
    env = envs.make(config.env, config.num_envs)
    obs_dim, num_actions = env.observation_shape[0], env.num_actions
    opt = optax.adam(config.learning_rate)

    def init(key):
        k_env, k_params, rng = jax.random.split(key, 3)
        params = 0.01 * jax.random.uniform(k_params, (obs_dim, num_actions), minval=-1.0)
        return State(params, opt.init(params),
                     env.reset(jax.random.split(k_env, config.num_envs)), rng, jnp.int32(0))

    def update(state):
        rng, k_act, k_env = jax.random.split(state.rng, 3)
        gumbel = jax.random.gumbel(k_act, (config.num_steps, config.num_envs, num_actions))
        env_keys = jax.random.split(k_env, (config.num_steps, config.num_envs))

        def step(env_state, xs):
            noise, keys = xs
            obs = env_state.obs
            action = jnp.argmax(obs @ state.params + noise, axis=-1)
            env_state, ts = env.step(keys, env_state, action)
            return env_state, (obs, action, ts)

        env_state, (obs, action, ts) = jax.lax.scan(step, state.env_state, (gumbel, env_keys))

        def loss_fn(params):
            logp = jax.nn.log_softmax(obs @ params)
            logp = jnp.take_along_axis(logp, action[..., None], axis=-1)[..., 0]
            return -jnp.mean(logp * ts.reward)

        loss, grad = jax.value_and_grad(loss_fn)(state.params)
        updates, opt_state = opt.update(grad, state.opt_state)
        done = ts.terminated | ts.truncated
        num_episodes = jnp.sum(done)
        metrics = {
            "loss": loss,
            "episode_return": jnp.sum(ts.episode_return) / jnp.where(num_episodes > 0,
                                                                      num_episodes, jnp.nan),
            "num_episodes": num_episodes,
        }
        new = State(optax.apply_updates(state.params, updates), opt_state, env_state, rng,
                    state.update_count + 1)
        return new, metrics

    steps = config.num_envs * config.num_steps
    return Algorithm(config=config, init=init, update=update,
                     num_updates=config.total_timesteps // steps, env_steps_per_update=steps)
