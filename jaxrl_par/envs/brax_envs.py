"""Brax environments (physics in JAX) as registered envs: ``"brax:<name>[:<backend>]"``.

``"brax:ant"`` is ``brax.envs.get_environment("ant")`` with Brax's default physics
backend, ``"brax:ant:positional"`` the same robot on the positional backend (``mjx``,
``generalized``, ``positional`` or ``spring``). They run inside the compiled programs
like every gymnax env, so every algorithm for continuous actions trains on them (PPO,
IMPALA, A3C, A2C, SAC), with the library's semantics rather than Brax's wrappers:

- **Time limit.** ``max_steps_in_episode`` (an env param, 1000 as in Brax's training
  scripts) cuts an episode as *truncated*: learners bootstrap from the observation it
  reached. Brax's own ``EpisodeWrapper`` marks the cut as ``done`` with a
  ``truncation`` flag, and its PPO leaves that step out of GAE.
- **Termination** is Brax's ``done`` (Ant and Hopper falling over, the pendulum
  dropping); auto-reset draws a new initial state from the step's reset key.
- **Actions** are the Box ``[-1, 1]^action_size`` that Brax's actuators take; rollouts
  clip sampled actions to it as for every continuous env.

Brax is an optional dependency: ``pip install 'jaxrl_par[brax]'``. Only envs with a flat
array observation are supported (Brax's default for every env it ships).
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import io
import warnings
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

PREFIX = "brax:"
BACKENDS = ("generalized", "positional", "spring", "mjx")
INSTALL = "pip install 'jaxrl_par[brax]' (or pip install brax)"


def is_brax(env_id: Any) -> bool:
    """Whether ``env_id`` names a Brax env (``"brax:..."``)."""
    return isinstance(env_id, str) and env_id.startswith(PREFIX)


def _brax_envs():
    """``brax.envs``, imported quietly (MuJoCo's optional Warp backend prints to stdout
    when it is absent), or an ``ImportError`` that names the install command."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            from brax import envs as brax_envs
    except ImportError as e:
        raise ImportError(f"Brax environments need brax: {INSTALL} ({e})") from None
    return brax_envs


def names() -> list[str]:
    """The environments Brax registers (``ant``, ``hopper``, ...), sorted."""
    return sorted(_brax_envs()._envs)  # Brax keeps its registry there, unexported


def parse(env_id: str) -> tuple[str, str | None]:
    """``"brax:ant:positional"`` -> ``("ant", "positional")``; no backend -> ``None``."""
    name, _, backend = env_id[len(PREFIX):].partition(":")
    return name, (backend or None)


def check_env_id(env_id: str) -> None:
    """``ValueError`` naming close names (or the backends) unless Brax knows the env;
    ``ImportError`` naming the install command when Brax is not installed."""
    name, backend = parse(env_id)
    known = names()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=5, cutoff=0.4)
        raise ValueError(f"unknown Brax environment {name!r} in {env_id!r}; closest: "
                         f"{', '.join(close) or 'none close'} (all: {', '.join(known)})")
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"unknown Brax backend {backend!r} in {env_id!r}; one of "
                         f"{', '.join(BACKENDS)}, e.g. brax:{name}:positional")


@struct.dataclass
class BraxParams(environment.EnvParams):
    max_steps_in_episode: int = 1000  # the time limit: truncation after this many steps


@struct.dataclass
class BraxState(environment.EnvState):  # gymnax's EnvState holds `time`
    inner: Any  # brax.envs.State: pipeline state, obs, reward, done, metrics, info


class BraxEnv(environment.Environment):
    """One Brax env behind gymnax's interface (``reset_env``/``step_env``/spaces), which
    :class:`jaxrl_par.envs.VecEnv` vectorises and auto-resets."""

    def __init__(self, env: Any, env_id: str):
        super().__init__()
        self.env = env
        self.env_id = env_id
        self._action_size = int(env.action_size)

    @functools.cached_property
    def _obs_size(self) -> int:
        # Brax's `observation_size` runs a reset op by op (many small compiles the first
        # time); the shape alone is enough. Not computed in __init__: the registry builds
        # envs under `jax.ensure_compile_time_eval`, where even this trace would run
        # Brax's initial kinematics op by op.
        obs = jax.eval_shape(self.env.reset, jax.random.key(0)).obs
        if not isinstance(obs, jax.ShapeDtypeStruct) or len(obs.shape) != 1:
            raise ValueError(f"{self.env_id}: only flat array observations are supported, "
                             f"this env observes {obs}")
        return obs.shape[0]

    @property
    def default_params(self) -> BraxParams:
        return BraxParams()

    def reset_env(self, key, params):
        inner = self.env.reset(key)
        return inner.obs, BraxState(time=0, inner=inner)

    def step_env(self, key, state, action, params):
        inner = self.env.step(state.inner, action)
        terminated = inner.done > 0.5
        return inner.obs, BraxState(time=state.time + 1, inner=inner), inner.reward, terminated, {}

    def action_space(self, params=None):
        return spaces.Box(-1.0, 1.0, (self._action_size,), jnp.float32)

    def observation_space(self, params=None):
        return spaces.Box(-jnp.inf, jnp.inf, (self._obs_size,), jnp.float32)

    @property
    def name(self) -> str:
        return self.env_id

    @property
    def num_actions(self) -> int:
        return self._action_size


def factory(env_id: str):
    """``() -> (BraxEnv, BraxParams())`` for ``"brax:<name>[:<backend>]"`` (the
    registry's factory form)."""

    def build():
        check_env_id(env_id)
        name, backend = parse(env_id)
        kwargs = {} if backend is None else {"backend": backend}
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            # Brax warns at every model load that its own pipelines are not maintained
            # (MJX is); the docs above say so once.
            warnings.filterwarnings("ignore", message="Brax System", category=UserWarning)
            env = _brax_envs().get_environment(name, **kwargs)
        return BraxEnv(env, env_id), BraxParams()

    return build

