"""The runtime of synchronous algorithms on host envs: a vector of gymnasium envs
(``gymnasium:<id>``) stepped in subprocesses, the policy and the learner jitted on the
device.

An algorithm whose update is split at the env step (:class:`~jaxrl_par.algos.base.HostSteps`:
PPO, DQN, SAC, DDPG, TD3, and any algorithm that gives the same two pieces) runs each update as
``num_steps`` host steps and one learning call::

    for t in range(T):
        action = act(state, obs, t)          # jitted, vmapped over seed lanes
        envs.step_async(action)              # the subprocesses step...
        ...record the previous step...       # ...while the host stores what it has
        obs, timestep = envs.step_wait()
        state = observe(state, action, timestep.done)   # only with HostSteps.observe
    state, metrics = learn(state, rollout)   # jitted; dispatched, not waited for

The host loop only moves observations and actions. Calls to the device are dispatched
asynchronously, and the host records a step while the subprocesses compute the next;
but a step's actions need the device's answer before the envs can step, and an
update's learning must finish before the next update acts (the maths of the on-device
update, on-policy for PPO), so the device and the envs mostly take turns.
:class:`HostTiming` measures how the wall clock splits between stepping the envs,
waiting for the device and the host's own work.

With ``overlap=True`` (a replay learner: :attr:`HostSteps.off_policy`), update ``u + 1``
acts with the state update ``u`` learned from, while ``u``'s learning runs::

    for u in range(num_updates):
        acting = previous input of learn          # u = 0: state itself, as without overlap
        rollout = T steps of act(acting, obs, t + T)   # on the acting device
        state, metrics = learn(state, rollout)    # dispatched; runs during the next rollout

so the parameters acted with lag one update behind (see :class:`HostLoop`).

It is a runtime of the runner (``train(algo, ..., vector_env="grouped")``, the default
for such algorithms): chunks, logs, checkpoints and evaluation work as on the device. The
envs are not part of the checkpointed state: a resumed run starts new episodes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_par import envs
from jaxrl_par.algos.base import Algorithm
from jaxrl_par.algos.config import algorithm_name
from jaxrl_par.blocks.host_steps import Rollout
from jaxrl_par.blocks.reads import leaves_read, pruned
from jaxrl_par.envs import host


@dataclasses.dataclass
class HostTiming:
    """Where a host loop's wall clock went (seconds, summed over the chunks run).

    Attributes:
      env: stepping the envs (from the start of a step to its results; the device can
        compute meanwhile).
      device: waiting for the device (the actions of a step, which without ``overlap``
        waits for the previous update's learning too).
      wall: the chunks' whole time; ``wall - env - device`` is the host's own work
        (records, stacking, transfers).
      env_steps: env steps taken, all envs of all lanes.
    """

    env: float = 0.0
    device: float = 0.0
    wall: float = 0.0
    env_steps: int = 0

    def fractions(self) -> dict[str, float]:
        """Shares of the wall clock: ``env``, ``device`` and ``host`` (the rest)."""
        wall = max(self.wall, 1e-9)
        return {"env": self.env / wall, "device": self.device / wall,
                "host": max(0.0, 1.0 - (self.env + self.device) / wall)}


def check_overlap(algo: Algorithm) -> None:
    """``ValueError`` (one line) unless ``algo``'s host steps can act one update behind
    their learning: an off-policy learner (:attr:`HostSteps.off_policy`) whose acting
    carries no state from step to step (no :attr:`HostSteps.observe`)."""
    name = algorithm_name(algo.config)
    steps = algo.host_steps
    if steps is None or not steps.off_policy:
        raise ValueError(f"overlap: {name} learns on-policy (its acting must use the current "
                         "parameters); overlapping learning with the env steps is for the "
                         "replay learners dqn, sac, ddpg and td3")
    if steps.observe is not None:
        raise ValueError(f"overlap: {name} carries its acting noise from step to step in the "
                         "state (HostSteps.observe, exploration='ou'), which a lagged rollout "
                         "would lose; use exploration='gaussian'")


def acting_device(learner: jax.Device) -> jax.Device:
    """The device the lagged rollouts of ``overlap=True`` act on: one whose programs run
    at the same time as ``learner``'s (each device runs its programs in order). The
    first CPU device beside an accelerator; on CPU, another CPU device when there are
    several (``jaxrl_par.platform.cpu_threads.devices(2)``, or the CLI's
    ``--overlap-learning``); else ``learner`` itself, where acting waits behind learning
    (the lag without the overlap)."""
    if learner.platform != "cpu":
        return jax.devices("cpu")[0]
    others = [d for d in jax.local_devices(backend="cpu") if d != learner]
    return others[0] if others else learner


class Lag(NamedTuple):
    """What a chunk of ``overlap=True`` leaves for the next: the update the next chunk
    starts at, the state it returned, and the state its last update learned from, pruned
    to the leaves ``act`` reads (:func:`~jaxrl_par.blocks.reads.pruned`), which the next
    update acts with."""

    update: int
    state: Any
    acting: Any


class HostLoop:
    """Runs an algorithm with :attr:`Algorithm.host_steps` on a vector of host envs, one
    per seed lane, for :func:`jaxrl_par.runner.train`.

    Args:
      algo: the algorithm, made on a ``"gymnasium:<id>"`` env.
      vector_env: ``"grouped"`` (a subprocess per core, each stepping a group of the
        envs: :mod:`jaxrl_par.envs.grouped`), ``"async"`` (gymnasium's
        ``AsyncVectorEnv``: a subprocess per env, shared memory) or ``"sync"``
        (``SyncVectorEnv``: in this process). All three give the same results for a
        seed.
      overlap: overlap each update's learning with the next update's env steps, for the
        replay learners (:attr:`HostSteps.off_policy`, without ``observe``: DQN, SAC,
        TD3 and DDPG with Gaussian noise; others are a ``ValueError``). Update ``u`` of
        a chunk, past the run's first, acts with the state update ``u - 1`` took as
        input (parameters one update old; so is everything acting reads from the
        state, e.g. DQN's epsilon and SAC's random warm-up, which lag one update), at
        step keys ``t + T`` of that state's key (``act(state_{u-1}, obs, t + T)``, ``T =
        num_steps``: steps ``0 .. T-1`` are those that state acts with when it is not
        lagged), on :func:`acting_device`, while ``learn`` of update ``u - 1`` runs;
        ``learn`` of update ``u`` then takes ``learn`` ``u - 1``'s output and update
        ``u``'s rollout, as without overlap. The run's first update, and the first of
        a chunk whose state is not the one the previous chunk returned (a resumed run,
        or a state PBT replaced), act with the state itself as without overlap.
    """

    concurrent = False  # one host thread

    def __init__(self, algo: Algorithm, vector_env: str = "grouped", overlap: bool = False):
        if algo.host_steps is None:
            raise ValueError(f"{algorithm_name(algo.config)} has no "
                             f"host steps: it cannot step a vector of host envs; "
                             f"{host.RUNTIMES}")
        host.check_vector_env(vector_env)
        if overlap:
            check_overlap(algo)
        self.algo = algo
        self.vector_env = vector_env
        self.overlap = overlap
        self.learner_device = jax.devices()[0]
        #: where lagged rollouts act (the learner's device without ``overlap``)
        self.act_device = acting_device(self.learner_device) if overlap else self.learner_device
        self.timing = HostTiming()
        #: ``[S]`` :class:`~jaxrl_par.envs.host.HostVecEnv`, made at the first compile.
        self.host_envs: list[host.HostVecEnv] = []
        steps = algo.host_steps
        self._act = jax.jit(jax.vmap(steps.act, in_axes=(0, 0, None)))
        self._learn = jax.jit(jax.vmap(steps.learn))
        self._warmup_learn = (jax.jit(jax.vmap(steps.warmup_learn))
                              if steps.warmup_learn is not None else None)
        self._observe = (jax.jit(jax.vmap(steps.observe))
                         if steps.observe is not None else None)
        self._read: tuple[bool, ...] = ()  # the state's leaves act reads (overlap)
        self._lag: Lag | None = None

    def close(self) -> None:
        """Closes the envs (their subprocesses)."""
        for env in self.host_envs:
            env.close()
        self.host_envs = []

    def start(self, state: Any) -> None:
        """Makes each lane's envs, seeded from its ``state.key`` (once: episodes run on
        across chunks and runs)."""
        cfg = self.algo.config
        if not self.host_envs:
            self.host_envs = host.lane_envs(cfg.env, cfg.num_envs, state.key,
                                            self.vector_env)

    def compile(self, state: Any, chunk_updates: int) -> Callable:
        """``chunk(state, start) -> (state, metrics [S, chunk_updates])``: the runner's chunk
        contract (rows past ``algo.num_updates`` zero). Starts the envs (:meth:`start`)
        and compiles ``act`` and ``learn`` on dummy data (with ``overlap``, the lagged
        ``act`` on :attr:`act_device` too)."""
        cfg = self.algo.config
        self.start(state)
        obs = np.zeros_like(self._lane_obs())
        action = self._act(state, obs, np.int32(0))
        if self._observe is not None:
            jax.block_until_ready(self._observe(state, action, np.zeros(obs.shape[:2], bool)))
        if self.overlap:
            act = jax.vmap(self.algo.host_steps.act, in_axes=(0, 0, None))
            self._read = leaves_read(act, state, obs, np.int32(0))
            jax.block_until_ready(self._act(self._acting_copy(self._read_leaves(state)), obs,
                                            np.int32(0)))
        action = jax.device_get(action)
        zeros = [{k: np.zeros_like(v) for k, v in self._empty_step().items()}
                 ] * cfg.num_steps
        rollout = self._rollout_arrays([obs] * cfg.num_steps, [action] * cfg.num_steps,
                                       zeros)
        for learn in (self._learn, self._warmup_learn):
            if learn is not None:
                jax.block_until_ready(learn(state, rollout))
        return lambda state, start: self._chunk(state, start, chunk_updates)

    def _lane_obs(self) -> np.ndarray:
        return np.stack([env.obs for env in self.host_envs])  # [S, N, ...]

    def _empty_step(self) -> dict[str, np.ndarray]:
        s, n = len(self.host_envs), self.algo.config.num_envs
        obs = self._lane_obs()
        return {"obs": obs, "reward": np.zeros((s, n), np.float32),
                "terminated": np.zeros((s, n), bool), "truncated": np.zeros((s, n), bool),
                "final_obs": obs, "episode_return": np.zeros((s, n), np.float32),
                "episode_length": np.zeros((s, n), np.int32)}

    @staticmethod
    def _rollout_arrays(obs: list, actions: list, steps: list[dict]) -> Rollout:
        """The :class:`Rollout` ``[S, T, N, ...]`` of ``T`` steps' records."""
        def stack(*xs):  # on the host, then one transfer
            return jnp.asarray(np.stack(xs, axis=1))

        timestep = envs.Timestep(**{name: stack(*[st[name] for st in steps])
                                    for name in envs.Timestep._fields})
        return Rollout(obs=stack(*obs), action=stack(*[a.action for a in actions]),
                       extras=jax.tree.map(stack, *[a.extras for a in actions]),
                       timestep=timestep)

    def rollout(self, state: Any) -> Rollout:
        """``num_steps`` steps of every lane's envs acting with ``state``: a
        :class:`Rollout` ``[S, T, N, ...]``, as ``learn`` takes it."""
        return self.observed_rollout(state)[1]

    def observed_rollout(self, state: Any) -> tuple[Any, Rollout]:
        """``(state, rollout)``: :meth:`rollout` and the state after its steps (changed
        only by ``HostSteps.observe``)."""
        return self._steps(self._act, state, self._observe, offset=0)

    def lagged_rollout(self, acting: Any) -> Rollout:
        """:meth:`rollout` acting with ``acting``, a state pruned to the leaves ``act``
        reads (``overlap``: the state the last update learned from), on
        :attr:`act_device`, at step keys ``t + num_steps``."""
        return self._steps(self._act, self._acting_copy(acting), None,
                           offset=self.algo.config.num_steps)[1]

    def _read_leaves(self, state: Any) -> Any:
        return pruned(state, self._read)

    def _acting_copy(self, acting: Any) -> Any:
        return jax.device_put(acting, self.act_device)  # nothing moves on one device

    def _steps(self, act: Callable, state: Any, observe: Callable | None, offset: int
               ) -> tuple[Any, Rollout]:
        """``(state, rollout)`` of ``num_steps`` steps acting with ``act(state, obs,
        offset + t)``; ``observe``, when given, changes ``state`` after each step."""
        timing, lanes = self.timing, self.host_envs
        obs_rows, actions, steps = [], [], []
        obs = self._lane_obs()
        for t in range(self.algo.config.num_steps):
            action = on_device = act(state, obs, np.int32(offset + t))
            t0 = time.perf_counter()
            action = jax.device_get(action)  # waits for the device
            t1 = time.perf_counter()
            for s, env in enumerate(lanes):
                env.step_async(action.env_action[s])
            obs_rows.append(obs)  # host work while the envs step
            actions.append(action)
            outs = [env.step_wait() for env in lanes]
            t2 = time.perf_counter()
            timing.device += t1 - t0
            timing.env += t2 - t1
            obs = self._lane_obs()
            step = {name: np.stack([o[name] for o in outs])
                    for name in ("reward", "terminated", "truncated", "final_obs",
                                 "episode_return", "episode_length")}
            step["obs"] = obs
            steps.append(step)
            if observe is not None:
                state = observe(state, on_device, step["terminated"] | step["truncated"])
        timing.env_steps += self.algo.config.num_steps * self.algo.config.num_envs * len(lanes)
        return state, self._rollout_arrays(obs_rows, actions, steps)

    def _lagged(self, state: Any, start: int) -> Any | None:
        """What update ``start`` acts with under ``overlap``: the read leaves of the state
        the previous chunk's last update learned from, if ``state`` is the one that chunk
        returned and ``start`` follows it; else None (act with ``state`` itself)."""
        lag, self._lag = self._lag, None
        if lag is None or lag.update != start or lag.state is not state:
            return None
        return lag.acting

    def _chunk(self, state: Any, start: int, chunk_updates: int):
        algo = self.algo
        t0 = time.perf_counter()
        rows = []
        start = int(start)
        acting = self._lagged(state, start)
        for u in range(start, start + chunk_updates):
            if u >= algo.num_updates:
                rows.append(jax.tree.map(jnp.zeros_like, rows[-1]))
                continue
            learn = self._learn
            if u < algo.warmup_updates and self._warmup_learn is not None:
                learn = self._warmup_learn
            if acting is None:
                state, rollout = self.observed_rollout(state)
            else:
                rollout = self.lagged_rollout(acting)
            if self.overlap:
                acting = self._read_leaves(state)
            state, metrics = learn(state, rollout)  # dispatched
            rows.append(metrics)
        if self.overlap:
            self._lag = Lag(start + chunk_updates, state, acting)
        metrics = jax.tree.map(lambda *xs: jnp.stack(xs, axis=1), *rows)
        jax.block_until_ready(metrics)
        self.timing.wall += time.perf_counter() - t0
        return state, metrics
