"""A trained policy as a plain callable: ``policy = load_policy(run_dir); action = policy(obs)``.

:func:`load_policy` reads a run's log dir (through :func:`~jaxrl_par.runner.runs.load_run`)
or a file written by :func:`export_policy`, keeps of the training state only the leaves
the algorithm's ``act`` reads (found by tracing ``act`` once: the parameters, and PPO's
observation statistics where it normalises observations; no optimiser, envs or replay),
and returns a :class:`Policy`. Calling it acts greedily (``Algorithm.act``: argmax Q, or
the distribution's mode) on one observation or a batch, numpy or jax, with one compiled
program per batch size, so it is cheap to call step by step from a Python loop over a
gymnasium env::

    policy = load_policy("runs/cartpole")
    env = gymnasium.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    obs, reward, terminated, truncated, _ = env.step(policy(obs))

:func:`export_policy` writes those leaves alone with ``flax.serialization`` (msgpack) and
the algorithm's config as JSON beside them (``policy.msgpack`` and ``policy.json``), which
``load_policy("policy.msgpack")`` reads without the training state.
"""

from __future__ import annotations

import json
import os
from typing import Any

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_par import algos, envs
from jaxrl_par.algos.base import Algorithm
from jaxrl_par.algos.config import algorithm_name
from jaxrl_par.blocks.reads import leaves_read, pruned
from jaxrl_par.envs import host
from jaxrl_par.runner.precision import float32
from jaxrl_par.runner.records import config_record
from jaxrl_par.runner.runs import config_from_record, load_run, read_metrics

FORMAT = 1  # the version of export_policy's files


def acting_leaves(algo: Algorithm, state: Any) -> list[bool]:
    """For each leaf of the unbatched ``state`` (``jax.tree.leaves`` order), whether
    ``algo.act(state, obs, key)`` or ``algo.sample`` reads it (:func:`leaves_read`)."""
    obs = jax.ShapeDtypeStruct((1, *observation_shape(algo.config.env)), jnp.float32)
    keep = [False] * len(jax.tree.leaves(state))
    for fn in (algo.act, algo.sample):
        if fn is not None:
            read = leaves_read(fn, state, obs, jax.random.key(0))
            keep = [k or r for k, r in zip(keep, read, strict=True)]
    return keep


def observation_shape(env_id: str) -> tuple[int, ...]:
    """The shape of one observation of ``env_id`` (a JAX env or ``gymnasium:<id>``)."""
    if host.is_host(env_id):
        return tuple(host.spec(env_id).observation_shape)
    return tuple(envs.make(env_id, 1).observation_shape)


class Policy:
    """A trained policy: ``policy(obs) -> action``, greedy unless made with ``sample``.

    Attributes:
      algo: the algorithm it came from (its ``act``, ``sample`` and ``config``).
      state: one seed's training state, with ``None`` for every leaf that neither ``act``
        nor ``sample`` reads.
      observation_shape: the shape of one observation.
      seed: the training seed it came from (None when unknown).
      sample: whether calls without a key draw actions (from a key stream of the policy's
        own, seeded by ``sample_seed``) instead of taking the greedy one.
    """

    def __init__(self, algo: Algorithm, state: Any, seed: int | None = None, *,
                 sample: bool = False, sample_seed: int = 0):
        if sample and algo.sample is None:
            raise ValueError(f"{self._name(algo)} acts greedily only (argmax Q): give "
                             "sample=False")
        self.algo = algo
        self.state = state
        self.seed = seed
        self.sample = sample
        self.observation_shape = observation_shape(algo.config.env)
        self._act = jax.jit(algo.act)
        self._draw = None if algo.sample is None else jax.jit(
            lambda s, obs, key, i: algo.sample(s, obs, jax.random.fold_in(key, i)))
        self._key = jax.random.key(sample_seed)
        self._calls = 0  # draws so far: each call folds its count into the key

    @staticmethod
    def _name(algo: Algorithm) -> str:
        return algorithm_name(algo.config)

    def _run(self, obs: jax.Array, key: jax.Array | None) -> jax.Array:
        if key is None and not self.sample:
            return self._act(self.state, obs, self._key)
        if self._draw is None:
            raise ValueError(f"{self._name(self.algo)} acts greedily only (argmax Q): call "
                             "the policy without a key")
        if key is not None:
            return self._draw(self.state, obs, key, 0)
        self._calls += 1
        return self._draw(self.state, obs, self._key, self._calls)

    @property
    def env(self) -> str:
        """The id of the env it was trained on."""
        return self.algo.config.env

    @float32
    def __call__(self, obs, key: jax.Array | None = None):
        """The action for ``obs``: the greedy one, or drawn from the policy's distribution
        with ``key`` (or with the policy's own key stream if it was made with ``sample``).

        Args:
          obs: one observation (``observation_shape``) or a batch ``[N, *observation_shape]``,
            a numpy or jax array (or nested lists).
          key: a PRNG key to draw the action with (actor-critic algorithms and SAC;
            Q-learners act greedily only).

        Returns:
          the action (``[]`` int32 for discrete actions, ``[A]`` float32 for continuous),
          or a batch of them ``[N, ...]``; a jax array for a jax input, else numpy.

        Raises:
          ValueError: ``obs`` has neither shape.
        """
        as_jax = isinstance(obs, jax.Array)
        x = jnp.asarray(obs, jnp.float32)
        shape = self.observation_shape
        if x.shape == shape:
            action = self._run(x[None], key)[0]
        elif x.ndim == len(shape) + 1 and x.shape[1:] == shape:
            action = self._run(x, key)
        else:
            raise ValueError(f"observation of shape {tuple(x.shape)}: this policy ({self.env}) "
                             f"takes one observation of shape {shape} or a batch "
                             f"[N, {', '.join(map(str, shape))}]")
        return action if as_jax else np.asarray(action)

    def __repr__(self) -> str:
        mode = "sampled" if self.sample else "greedy"
        return f"Policy({self._name(self.algo)} on {self.env}, seed {self.seed}, {mode})"


def best_lane(log_dir: str, seeds: list[int]) -> int:
    """The index of the seed :func:`load_policy` takes from a run with several: the best by
    the last greedy return the run recorded (``greedy_return`` in ``metrics.jsonl``, from
    ``--eval-every``), else the first seed."""
    try:
        _, metrics = read_metrics(log_dir)
    except FileNotFoundError:
        return 0
    greedy = metrics.get("greedy_return")
    if greedy is None or greedy.shape[0] != len(seeds):
        return 0
    recorded = [u for u in range(greedy.shape[1]) if np.all(np.isfinite(greedy[:, u]))]
    return int(np.argmax(greedy[:, recorded[-1]])) if recorded else 0


def _acting_state(algo: Algorithm, state: Any) -> Any:
    """``state`` with ``None`` for every leaf ``act`` does not read."""
    return pruned(state, acting_leaves(algo, state))


def _from_run(log_dir: str, seed: int | None, sample: bool) -> Policy:
    run = load_run(log_dir)
    if seed is None:
        lane = best_lane(log_dir, run.seeds)
    elif seed in run.seeds:
        lane = run.seeds.index(seed)
    else:
        raise ValueError(f"seed {seed} is not one of the run's seeds {run.seeds}: give one "
                         "of them, or no seed")
    state = jax.tree.map(lambda x: x[lane], run.state)
    return Policy(run.algo, _acting_state(run.algo, state), run.seeds[lane], sample=sample)


def _paths(algo: Algorithm) -> tuple[list[str], Any, list[Any]]:
    """``(path strings, treedef, leaf shapes)`` of ``algo``'s unbatched state."""
    template = jax.eval_shape(algo.init, jax.random.key(0))
    with_paths, treedef = jax.tree_util.tree_flatten_with_path(template)
    return [jax.tree_util.keystr(p) for p, _ in with_paths], treedef, [x for _, x in with_paths]


def export_policy(run_dir: str, path: str, *, seed: int | None = None) -> tuple[str, str]:
    """Writes one seed's acting parameters of the run in ``run_dir`` to ``path``.

    ``path`` (``.msgpack``) holds ``{leaf path: array}`` of the leaves ``act`` reads
    (``flax.serialization.msgpack_serialize``); ``path`` with ``.json`` for its suffix
    holds the algorithm's config record, the seed and those leaves' paths. Together they
    are what :func:`load_policy` needs.

    Args:
      run_dir: the run's log dir.
      path: where to write the parameters (``policy.msgpack``).
      seed: the seed to export; by default as :func:`load_policy` chooses.

    Returns:
      the paths of the parameters' and the config's files.
    """
    policy = load_policy(run_dir, seed=seed)
    with_paths, _ = jax.tree_util.tree_flatten_with_path(policy.state)  # None: not read
    arrays = {jax.tree_util.keystr(p): np.asarray(x) for p, x in with_paths}
    meta_path = os.path.splitext(path)[0] + ".json"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as f:
        f.write(flax.serialization.msgpack_serialize(arrays))
    record = config_record(policy.algo)
    meta = {"format": FORMAT, "config": record, "seed": policy.seed, "leaves": sorted(arrays),
            **envs.source_record(record.get("env"))}
    with open(meta_path, "w") as f:
        json.dump(meta, f, indent=1)
    return path, meta_path


def _from_export(path: str, sample: bool) -> Policy:
    meta_path = os.path.splitext(path)[0] + ".json"
    if not os.path.exists(meta_path):
        raise FileNotFoundError(f"{meta_path} does not exist: export_policy writes it beside "
                                f"{os.path.basename(path)} (keep the two together)")
    with open(meta_path) as f:
        meta = json.load(f)
    if meta.get("format") != FORMAT:
        raise ValueError(f"{meta_path} has format {meta.get('format')!r}, not {FORMAT}: "
                         "export the run again with this version of jaxrl_par")
    env_id = meta["config"].get("env")
    if isinstance(env_id, str):
        envs.import_source(env_id, meta)
    name, cfg = config_from_record(meta["config"])
    algo = algos.get(name).make(cfg)
    names, treedef, shapes = _paths(algo)
    with open(path, "rb") as f:
        arrays = flax.serialization.msgpack_restore(f.read())
    missing = sorted(set(meta["leaves"]) - set(arrays))
    if missing:
        raise ValueError(f"{path} lacks the leaves {missing} that {meta_path} lists: the two "
                         "files come from different exports")
    leaves = []
    for n, shape in zip(names, shapes, strict=True):
        if n not in arrays:
            leaves.append(None)
            continue
        x = np.asarray(arrays[n])
        if x.shape != shape.shape:
            raise ValueError(f"{path}: {n} has shape {x.shape}, the config makes "
                             f"{shape.shape}: the files do not match")
        leaves.append(jnp.asarray(x, shape.dtype))
    return Policy(algo, jax.tree.unflatten(treedef, leaves), meta.get("seed"), sample=sample)


@float32
def load_policy(path: str, *, seed: int | None = None, sample: bool = False) -> Policy:
    """The policy of a trained run, as a callable ``policy(obs) -> action``: greedy
    (``Algorithm.act``: argmax Q, or the distribution's mode), or with ``sample`` drawn
    from its distribution (``Algorithm.sample``), a new draw each call.

    Args:
      path: a run's log dir (``train(..., log_dir=...)`` or the CLI's ``--log-dir``), or
        the ``.msgpack`` file :func:`export_policy` (``jaxrl-par export``) wrote, with its
        ``.json`` beside it.
      seed: which of a run's seeds to take. By default the best by the last greedy
        return the run recorded (``--eval-every``), or else its first seed. (An export
        holds one seed.)
      sample: draw actions instead of taking the greedy one (actor-critic algorithms and
        SAC; any call given a ``key`` draws with it).

    Returns:
      a :class:`Policy`.

    Raises:
      FileNotFoundError: ``path`` is neither a run's log dir nor an exported policy.
      ValueError: ``seed`` is not one of the run's, or ``sample`` for a Q-learner.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        return _from_run(path, seed, sample)  # load_run: FileNotFoundError without a checkpoint
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} does not exist: give a run's log dir or the "
                                ".msgpack file that jaxrl-par export wrote")
    if seed is not None:
        raise ValueError("an exported policy holds one seed: give no seed (export another "
                         "seed with jaxrl-par export --seed)")
    return _from_export(path, sample)


def evaluate(source: Policy | Algorithm | str, states: Any = None, *, num_envs: int = 8,
             seed: int = 0) -> np.ndarray:
    """Greedy returns (:func:`~jaxrl_par.runner.evaluation.greedy_returns`) of what is given.

    Args:
      source: a run's log dir (every seed of it), a :class:`Policy` (its one seed), or an
        ``Algorithm`` with its ``states``.
      states: with an ``Algorithm``: training states ``[S, ...]`` (``TrainResult.state``).
      num_envs: episodes per seed, one in each of ``num_envs`` envs.
      seed: the evaluation's random stream.

    Returns:
      float64 ``[S]``: each seed's mean return over its ``num_envs`` greedy episodes
      (``[1]`` for a policy).
    """
    from jaxrl_par.runner.evaluation import greedy_returns

    if isinstance(source, Policy):
        algo, states = source.algo, jax.tree.map(lambda x: x[None], source.state)
    elif isinstance(source, Algorithm):
        if states is None:
            raise ValueError("evaluate(algo, states): give the states ([S, ...], e.g. "
                             "TrainResult.state) with an algorithm")
        algo = source
    else:
        run = load_run(os.fspath(source))
        algo, states = run.algo, run.state
    return greedy_returns(algo, states, num_envs=num_envs, seed=seed)


__all__ = ["Policy", "evaluate", "export_policy", "load_policy"]
