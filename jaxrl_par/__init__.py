"""jaxrl_par: every way of parallelising RL, on the accelerator, in JAX.

Quick start::

    from jaxrl_par import load_policy, plot_runs, ppo, record_video, train

    result = train(ppo.make(ppo.Config(env="CartPole-v1")), seeds=[0, 1, 2, 3],
                   log_dir="runs/cartpole")
    policy = load_policy("runs/cartpole")         # greedy: action = policy(obs)
    record_video(policy, "cartpole.gif")          # a GIF of a greedy episode
    plot_runs(["runs/cartpole"], "curves.png")    # return against env steps and seconds

Where things live:

* ``jaxrl_par.algos``: one module per algorithm (``Config``, ``State``, ``make``) and the
  protocol they share (:class:`Algorithm`).
* ``jaxrl_par.losses``: RL maths as pure, unbatched functions (returns, policy-gradient,
  Q-learning and soft actor-critic losses).
* ``jaxrl_par.networks``, ``jaxrl_par.replay``, ``jaxrl_par.envs``, ``jaxrl_par.blocks``:
  building blocks (flax networks and distributions, replay buffers, vectorised
  environments, rollouts and normalisation).
* ``jaxrl_par.parallel``: device meshes, data parallelism, the actor-learner and
  asynchronous-worker runtimes, multi-host start-up.
* ``jaxrl_par.runner``: :func:`train` and the plumbing of a run (checkpoints, logs,
  evaluation, sweeps, comparisons).
* ``jaxrl_par.platform``: optional platform-specific tuning, off the default path.

Submodules load on first use, so ``import jaxrl_par`` touches no device: a multi-host
run can still call ``jaxrl_par.parallel.initialize()`` (``jax.distributed.initialize``)
first. gymnax, imported by ``jaxrl_par.envs``, creates arrays when it is imported.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# name -> (module, attribute or None for the module itself)
_LAZY = {
    # functions and types
    "Algorithm": ("jaxrl_par.algos.base", "Algorithm"),
    "TrainResult": ("jaxrl_par.runner.training", "TrainResult"),
    "train": ("jaxrl_par.runner.training", "train"),
    "load_run": ("jaxrl_par.runner.runs", "load_run"),
    "greedy_returns": ("jaxrl_par.runner.evaluation", "greedy_returns"),
    "read_metrics": ("jaxrl_par.runner.runs", "read_metrics"),
    "compare": ("jaxrl_par.runner.compare", "compare"),
    # using a trained run
    "Policy": ("jaxrl_par.runner.policy", "Policy"),
    "evaluate": ("jaxrl_par.runner.policy", "evaluate"),
    "export_policy": ("jaxrl_par.runner.policy", "export_policy"),
    "load_policy": ("jaxrl_par.runner.policy", "load_policy"),
    "plot_runs": ("jaxrl_par.runner.plots", "plot_runs"),
    "record_video": ("jaxrl_par.runner.video", "record_video"),
    # algorithms
    "a2c": ("jaxrl_par.algos.a2c", None),
    "a3c": ("jaxrl_par.algos.a3c", None),
    "ddpg": ("jaxrl_par.algos.ddpg", None),
    "apex": ("jaxrl_par.algos.apex", None),
    "hyper": ("jaxrl_par.algos.hyper", None),
    "dqn": ("jaxrl_par.algos.dqn", None),
    "gorila": ("jaxrl_par.algos.gorila", None),
    "impala": ("jaxrl_par.algos.impala", None),
    "ppo": ("jaxrl_par.algos.ppo", None),
    "sac": ("jaxrl_par.algos.sac", None),
    "td3": ("jaxrl_par.algos.td3", None),
    # packages
    "algos": ("jaxrl_par.algos", None),
    "axes": ("jaxrl_par.axes", None),
    "blocks": ("jaxrl_par.blocks", None),
    "envs": ("jaxrl_par.envs", None),
    "losses": ("jaxrl_par.losses", None),
    "networks": ("jaxrl_par.networks", None),
    "parallel": ("jaxrl_par.parallel", None),
    "platform": ("jaxrl_par.platform", None),
    "replay": ("jaxrl_par.replay", None),
    "runner": ("jaxrl_par.runner", None),
}

__all__ = [
    "Algorithm",
    "Policy",
    "TrainResult",
    "a2c",
    "a3c",
    "algos",
    "apex",
    "axes",
    "blocks",
    "compare",
    "ddpg",
    "dqn",
    "envs",
    "evaluate",
    "export_policy",
    "gorila",
    "greedy_returns",
    "hyper",
    "impala",
    "load_policy",
    "load_run",
    "losses",
    "networks",
    "parallel",
    "platform",
    "plot_runs",
    "ppo",
    "read_metrics",
    "record_video",
    "replay",
    "runner",
    "sac",
    "td3",
    "train",
]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'jaxrl_par' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = importlib.import_module(module)
    if attr is not None:
        value = getattr(value, attr)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
