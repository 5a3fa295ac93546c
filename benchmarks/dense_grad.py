"""Weight-gradient forms of a dense layer on XLA:CPU, and what our layers do to whole updates.

Part 1 times each form in ``jaxrl_par.platform.layers.WEIGHT_GRADIENT_FORMS`` (``x [B, D]``,
``dy [B, H]`` -> ``[D, H]``) for the layer shapes our algorithms use, interleaved, median
of the repeats, and marks the one ``layers.weight_gradient_form`` picks. Part 2 times the
real PPO and DQN updates (``benchmarks/ppo.py``'s and ``benchmarks/apex.py
--speed-only``'s configs) built with ``layers.Dense`` and with ``flax.linen.Dense``; part
3 the MinAtar updates (benchmarks/apex.py's DQN and Ape-X, PPO's default CNN) built with
``layers.Conv`` and with ``flax.linen.Conv``; part 4 the updates of part 2 with
``layers.product``'s broadcast products for contractions of up to 4 terms and with every
product a dot. All updates are built as ``jaxrl_par.runner.training`` builds them
(``rng.unrolled_threefry``).
(A synthetic step, gradient and a per-leaf SGD update of the same networks, showed no
difference between the two layers, so only the real updates say what the layer is worth.)

Usage: ``taskset -c 0 python benchmarks/dense_grad.py [--repeats 7] [--quick]
[--narrow-only]``; writes ``benchmarks/results/dense_grad.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(__file__))
from common import compile_timed, interleaved, machine, write_json

from jaxrl_par import networks
from jaxrl_par.platform import layers

# (batch, fan_in, fan_out): PPO minibatches (4 .. 4096 CartPole envs x 128 steps / 4),
# MinAtar's flattened 400-wide input, DQN's batch of 128, and the MinAtar conv's weight
# gradient (3x3 over 4 channels -> 16; rows are images x 64 positions: 128 and 1,024 images).
SHAPES = [(b, d, h) for b in (128, 2048, 8192, 32768, 131072) for d, h in ((4, 64), (64, 64), (64, 2))]
SHAPES += [(2048, 400, 64), (8192, 400, 64), (8192, 64, 6), (8192, 36, 16), (65536, 36, 16)]


def _repeat(f, iters):
    def run(x, dy):
        def body(c, _):
            return c + jnp.sum(f(x * (1 + c), dy)) * 1e-12, None
        return jax.lax.scan(body, jnp.float32(0), None, length=iters)[0]
    return run


def forms_table(shapes, repeats):
    rows = []
    for b, d, h in shapes:
        kx, ky = jax.random.split(jax.random.key(b + d + h))
        x, dy = jax.random.normal(kx, (b, d)), jax.random.normal(ky, (b, h))
        iters = max(2, min(64, 4_000_000 // (b * d)))
        cases = {}
        for name, f in layers.WEIGHT_GRADIENT_FORMS.items():
            compiled, _ = compile_timed(_repeat(f, iters), x, dy)
            cases[name] = (compiled, (x, dy))
        med = {k: v / iters * 1e6 for k, v in interleaved(cases, repeats).items()}
        pick = layers.weight_gradient_form(b, d, h)
        rows.append({"batch": b, "fan_in": d, "fan_out": h, "us": med, "picked": pick,
                     "fastest": min(med, key=med.get), "plain_over_picked": med["plain"] / med[pick]})
        print(f"B={b:6d} {d:3d}->{h:3d}  " + "  ".join(f"{k} {v:9.1f}" for k, v in med.items())
              + f"  picked {pick} ({med['plain'] / med[pick]:.2f}x plain)", flush=True)
    return rows


def _swapped(module, name, value, fn):
    """Calls ``fn`` (which builds and traces networks) with ``module.<name>`` set to
    ``value``, restored after."""
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        return fn()
    finally:
        setattr(module, name, saved)


def _dqn_config():
    from apex import speed_config

    # benchmarks/apex.py --speed-only's config (10 envs x 10 steps and 10 gradient steps of
    # 128 per update), learning from the first update.
    cfg = speed_config("CartPole-v1", 100_000, 10, 10, 10, 128)
    return dataclasses.replace(cfg, learning_starts=0)


def _minatar_configs():
    from apex import configs

    from jaxrl_par.algos import ppo

    cfgs = configs("Breakout-MinAtar", 100_000)
    cfgs = {k: dataclasses.replace(v, learning_starts=0) for k, v in cfgs.items()
            if k in ("dqn", "apex")}
    cfgs["ppo"] = ppo.Config(env="Breakout-MinAtar", num_envs=64, total_timesteps=64 * 128 * 8)
    return cfgs


def _update_builder(label, seeds=None):
    """``(build, updates)`` for one setting of :func:`algorithm_updates`: ``build()``
    builds and compiles a scan of ``updates`` updates and returns ``(compiled, state)``."""
    from jaxrl_par.algos import apex, dqn, ppo, sac

    if label == "dqn":
        make, cfg, updates = dqn.make, _dqn_config(), 20
    elif label == "sac":  # the defaults (Pendulum, 64-64 critics and actor), learning at once
        make, cfg, updates = sac.make, sac.Config(learning_starts=0), 5
    elif label.startswith("minatar-"):
        kind = label.split("-", 1)[1]
        cfg = _minatar_configs()[kind]
        make = {"dqn": dqn.make, "apex": apex.make, "ppo": ppo.make}[kind]
        updates = 1 if kind == "ppo" else 5
    else:
        env, n = label.rsplit(":", 1)
        n = int(n)
        cfg = ppo.Config(env=env, num_envs=n, total_timesteps=n * 128 * 8, torso="mlp",
                         hidden_sizes=(64, 64), activation="tanh")
        make, updates = ppo.make, max(1, min(8, 40_000 // (n * 128)))

    def build():
        algo = make(cfg)
        if seeds is None:
            state, update = algo.init(jax.random.key(0)), algo.update
        else:
            state = jax.vmap(algo.init)(jax.random.split(jax.random.key(0), seeds))
            update = jax.vmap(algo.update)

        def run(s):
            return jax.lax.scan(lambda c, _: update(c), s, None, length=updates)
        return compile_timed(run, state, ours=True)[0], state
    return build, updates


def narrow_contraction_updates(settings, repeats):
    """The updates of ``settings`` (as :func:`algorithm_updates`) built with
    ``layers.product``'s broadcast products for contractions of up to
    ``layers.NARROW_CONTRACTION`` terms, and with that path off (every product a dot),
    interleaved."""
    rows = []
    for label in settings:
        build, updates = _update_builder(label)
        # A new function object: jax caches a traced branch by function, not by its globals.
        dots = functools.partial(layers._cpu_product, narrow_contraction=0)
        cases = {"broadcast": build(), "dot": _swapped(layers, "_cpu_product", dots, build)}
        med = {k: v / updates * 1e3 for k, v in interleaved(
            {k: (c, (s,)) for k, (c, s) in cases.items()}, repeats).items()}
        speedup = med["dot"] / med["broadcast"]
        rows.append({"setting": label, "ms_per_update": med, "speedup": speedup})
        print(f"{label:26s} ms/update: broadcast products {med['broadcast']:8.2f}  dots "
              f"{med['dot']:8.2f}  {speedup:.3f}x", flush=True)
    return rows


def algorithm_updates(settings, repeats, layer="Dense", seeds=None):
    """Updates of the real algorithms, built with ours and flax's ``layer``, interleaved.

    ``settings``: "ENV:NUM_ENVS" for PPO with 64-64 tanh MLPs, "dqn" for the CartPole DQN
    above, "sac" for SAC's defaults on Pendulum, or "minatar-dqn" / "minatar-apex" /
    "minatar-ppo" for benchmarks/apex.py's MinAtar configs (CNN torso) and PPO's default CNN on Breakout-MinAtar (64 envs).
    ``seeds``: vmap the update over that many seeds (as the runner does).
    """
    ours_cls, flax_cls = (layers.Dense, nn.Dense) if layer == "Dense" else (layers.Conv, nn.Conv)
    rows = []
    for label in settings:
        build, updates = _update_builder(label, seeds)
        cases = {}
        for name, cls in (("ours", ours_cls), ("flax", flax_cls)):
            compiled, state = _swapped(networks, layer, cls, build)
            cases[name] = (compiled, (state,))
        med = {k: v / updates * 1e3 for k, v in interleaved(cases, repeats).items()}
        speedup = med["flax"] / med["ours"]
        tag = label if seeds is None else f"{label} x{seeds} seeds"
        rows.append({"setting": label, "seeds": seeds, "layer": layer, "ms_per_update": med,
                     "speedup": speedup})
        print(f"{tag:26s} ms/update: layers.{layer} {med['ours']:8.2f}  flax {layer} "
              f"{med['flax']:8.2f}  {speedup:.2f}x", flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="two shapes, three updates, 3 repeats")
    p.add_argument("--narrow-only", action="store_true",
                   help="only part 4: the updates with and without narrow-contraction products")
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                 "dense_grad.json"))
    a = p.parse_args()
    shapes = SHAPES
    settings = ["CartPole-v1:4", "CartPole-v1:64", "CartPole-v1:1024", "CartPole-v1:4096",
                "Breakout-MinAtar:256", "dqn"]
    conv_settings = ["minatar-dqn", "minatar-apex", "minatar-ppo"]
    if a.quick:
        shapes, settings, a.repeats = [(128, 4, 64), (2048, 64, 2)], ["CartPole-v1:4", "dqn"], 3
        conv_settings = ["minatar-dqn"]
    if jax.default_backend() != "cpu":
        print(f"note: backend {jax.default_backend()}: layers.Dense uses the plain form there")
    narrow_settings = settings + ["sac"]
    if a.narrow_only:
        print("Part 4: updates with contractions of <= 4 terms as broadcast products or dots")
        narrow = narrow_contraction_updates(narrow_settings, a.repeats)
        write_json(a.out, {"machine": machine(), "narrow_contraction_updates": narrow})
        print(f"wrote {a.out}")
        return
    print("Part 1: weight-gradient forms, us per product")
    forms = forms_table(shapes, a.repeats)
    print("\nPart 2: PPO (64-64 tanh MLPs) and DQN updates, built with each Dense")
    updates = algorithm_updates(settings, a.repeats)
    print("\nPart 3: MinAtar updates (CNN torso), built with each Conv")
    conv = algorithm_updates(conv_settings, a.repeats, layer="Conv")
    conv += algorithm_updates(conv_settings[:1], a.repeats, layer="Conv", seeds=4)
    print("\nPart 4: updates with contractions of <= 4 terms as broadcast products or dots")
    narrow = narrow_contraction_updates(narrow_settings, a.repeats)
    write_json(a.out, {"machine": machine(), "forms": forms, "updates": updates,
                       "conv_updates": conv, "narrow_contraction_updates": narrow})
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
