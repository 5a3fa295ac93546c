"""PureJaxRL's PPO (``purejaxrl/ppo.py``, unmodified) timed as its users compile it.

Runs in an environment of its own, since PureJaxRL needs gymnax 0.0.9 (its ``step`` returns
five values), distrax, and brax and navix (its ``wrappers.py`` imports both); its
``dqn.py`` also imports flashbax and wandb::

    python3 -m venv /tmp/pj && /tmp/pj/bin/pip install "jax==0.10.2" "gymnax==0.0.9" \\
        distrax flax optax brax navix "flashbax==0.1.3" wandb
    git clone https://github.com/luchris429/purejaxrl && git -C purejaxrl checkout 31756b1
    /tmp/pj/bin/python benchmarks/purejaxrl_ppo.py --dir purejaxrl \\
        --env CartPole-v1 --num-envs 4 --updates 61 --repeats 3

It imports ``make_train`` from ``<dir>/purejaxrl/ppo.py`` (with that folder on the path, as
``python purejaxrl/ppo.py`` has it) with the config of that file's
``__main__`` (``DEBUG`` off: no per-episode host callback), the env and env count given,
and ``TOTAL_TIMESTEPS = num_envs * 128 * updates``; compiles ``jax.jit(make_train(config))``
timed apart; then times whole calls (init and ``updates`` updates, the program its users
run). Prints one JSON line: ``steps_per_second`` (median over ``repeats`` calls after a
warm-up call), ``compile_s``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

MAIN_CONFIG = {  # purejaxrl/ppo.py's __main__, at commit 31756b1
    "LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 5e5, "UPDATE_EPOCHS": 4,
    "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01,
    "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5, "ACTIVATION": "tanh", "ENV_NAME": "CartPole-v1",
    "ANNEAL_LR": True, "DEBUG": True,
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", required=True, help="a checkout of luchris429/purejaxrl")
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--num-envs", type=int, default=4)
    p.add_argument("--updates", type=int, default=61)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    sys.path.insert(0, f"{args.dir}/purejaxrl")  # as `python purejaxrl/ppo.py` has it
    import jax
    from ppo import make_train

    config = {**MAIN_CONFIG, "ENV_NAME": args.env, "NUM_ENVS": args.num_envs, "DEBUG": False,
              "TOTAL_TIMESTEPS": args.num_envs * MAIN_CONFIG["NUM_STEPS"] * args.updates}
    key = jax.random.PRNGKey(30)
    t = time.perf_counter()
    compiled = jax.jit(make_train(config)).lower(key).compile()
    compile_s = time.perf_counter() - t
    jax.block_until_ready(compiled(key))  # warm-up
    seconds = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        jax.block_until_ready(compiled(key))
        seconds.append(time.perf_counter() - t)
    steps = config["TOTAL_TIMESTEPS"]
    print(json.dumps({"steps_per_second": steps / statistics.median(seconds),
                      "compile_s": compile_s, "seconds": seconds}))


if __name__ == "__main__":
    main()
