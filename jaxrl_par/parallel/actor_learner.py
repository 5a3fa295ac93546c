"""Actors and learner on devices of their own, running at the same time.

An algorithm made for the pipeline (``apex.Config(pipeline=True)``) splits its update into
an actors' half and a learner's half that do not read each other's output within one
update: the actors act update ``u``'s batch with the parameters the learner handed them
after update ``u - 1``, while the learner learns from the batch acted in update ``u - 1``
(:func:`jaxrl_par.algos.base.pipelined_update` writes that down for one device).

:class:`ActorLearner` runs the two halves as two compiled programs, the actors' on one
device and the learner's (replay included) on another, and swaps their outputs between
updates: the new batch goes to the learner, the new parameter copy to the actors. JAX
dispatches both programs before either finishes, so the actors' work runs beside the
learner's instead of before it: on two accelerators, or on two CPU devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=2`` before jax starts), whose
programs share the host's cores with XLA's own intra-op threads. The batch and the
parameter copy cross devices packed into one flat array per dtype
(:mod:`jaxrl_par.parallel.packing`, inside the compiled halves), but each update still
costs two program calls and two transfers from Python, so it pays only for updates that
take much longer than that (Ape-X on MinAtar rather than on CartPole). The schedule is
fixed by the data each half waits for, not by timing, so a run is deterministic and
equals the algorithm's own ``update`` on one device (``train`` without
``actor_learner``), up to the two programs being compiled apart.

Used through ``train(algo, seeds, actor_learner=True)``; chunks, progress, logs,
checkpoints and Ctrl-C work as for any run (the state is joined on the learner's device
after every chunk).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxrl_par import algos
from jaxrl_par.algos.base import Algorithm
from jaxrl_par.algos.config import algorithm_name
from jaxrl_par.parallel import lru, packing

# The compiled halves of recent runs, keyed by the parts themselves, the two devices and
# the halves' shapes, so a second run of the same algorithm compiles nothing (as the
# plain runner's caches do); least recently used out first.
_compiled = lru.LRU(8)


def _shapes(tree) -> tuple:
    leaves, treedef = jax.tree.flatten(tree)
    return treedef, tuple((x.shape, x.dtype) for x in leaves)


def check_algorithm(algo: Algorithm) -> None:
    """A ``ValueError`` naming the fix unless ``algo`` has an actor-learner
    :class:`~jaxrl_par.algos.base.Pipeline` (and acts through it or on host envs)."""
    module = algorithm_name(algo.config)
    if algo.pipeline is None:
        able = algos.with_config_field("pipeline")
        hint = (f"make it with {module}.Config(pipeline=True)" if module in able else
                f"only algorithms with a pipelined update run this way: "
                f"{algos.listed(able)} with Config(pipeline=True)")
        raise ValueError(f"actor_learner: {module} has no actor-learner pipeline; {hint}")
    if algo.pipeline.actor is None and algo.host is None:
        raise ValueError(f"actor_learner: {module}'s pipeline has no actors' half")


def pick_devices(devices: bool | Sequence[jax.Device] | None) -> tuple[jax.Device, jax.Device]:
    """``(learner_device, actor_device)``: from two given devices, or (``True``) the first
    two local devices. With one local device both halves share it."""
    if devices is True or devices is None:
        local = jax.local_devices()
        return local[0], local[1 if len(local) > 1 else 0]
    devices = list(devices)
    if len(devices) != 2:
        raise ValueError(f"actor_learner: give two devices (learner's, actors'), got "
                         f"{len(devices)}")
    return devices[0], devices[1]


class ActorLearner:
    """The two-device runtime of a pipelined algorithm (see the module docstring).

    Args:
      algo: an algorithm with a :class:`~jaxrl_par.algos.base.Pipeline`. Its ``split``
        and ``join`` only rearrange the state's fields, so they are applied to the
        seed-batched state as they are; ``actor`` and ``learner`` are vmapped over seeds.
        Actors on host envs (``algo.host``) are stepped from Python.
      devices: ``(learner_device, actor_device)``, or ``True`` for the first two local
        devices (one shared device if there is only one).
    """

    def __init__(self, algo: Algorithm, devices: bool | Sequence[jax.Device] | None = True):
        check_algorithm(algo)
        self.algo = algo
        self.learner_device, self.actor_device = pick_devices(devices)
        #: The actors' host envs (``[S]`` :class:`~jaxrl_par.envs.host.HostVecEnv`) for
        #: an algorithm on gymnasium envs; made at the first compile.
        self.host_envs: list = []

    @property
    def concurrent(self) -> bool:
        """Whether the halves run on two devices (else they share one)."""
        return self.learner_device != self.actor_device

    def compile(self, state: Any, chunk_updates: int) -> Callable:
        """``chunk(state, start) -> (state, metrics [S, chunk_updates])``, the runner's chunk
        contract: updates ``start .. start + chunk_updates - 1`` (those at or past
        ``algo.num_updates`` are not run; their metrics rows are zeros)."""
        pipeline, acting = self.algo.pipeline, self.algo.host
        actor, copy, learner, pending = pipeline.split(state)

        def to_actor(tree):
            return jax.device_put(tree, self.actor_device)

        def to_learner(tree):
            return jax.device_put(tree, self.learner_device)

        key = (pipeline.actor or acting.step, pipeline.learner,
               self.actor_device, self.learner_device, _shapes((actor, copy)),
               _shapes((learner, pending)))
        on_host = pipeline.actor is None
        if on_host and not self.host_envs:  # once per runtime: episodes run on across chunks
            self.host_envs = acting.make_envs(actor.key)
        programs = _compiled.get(key, lambda: _compile_halves(
            pipeline, to_actor(actor), to_actor(copy), to_learner(learner),
            to_learner(pending)))
        self.actor_program, self.learner_program = programs.actor, programs.learner
        num_updates = self.algo.num_updates

        def host_actor(actor, packed_copy):
            """The actors' half on host envs: stepped here, in Python, while the
            learner's program (dispatched first) runs on its device."""
            actor, acted, metrics = acting.step(
                self.host_envs, actor, programs.unpack_copy(packed_copy))
            return actor, programs.pack_acted(to_actor(acted)), metrics

        def chunk(state, start):
            n = min(chunk_updates, num_updates - int(start))
            actor, copy, learner, pending = pipeline.split(state)
            # the batch and the parameter copy cross devices packed: a few flat arrays
            actor, copy = to_actor(actor), programs.pack_copy(to_actor(copy))
            learner = to_learner(learner)
            if on_host and int(start) == 0:  # init left the first trajectories to act
                actor, pending, _ = host_actor(actor, copy)
                pending = to_learner(pending)
            else:
                pending = programs.pack_acted(to_learner(pending))
            rows = []
            for i in range(n):
                if on_host:  # the learner first, so it runs while Python steps the envs
                    old_copy = copy
                    learner, copy, learner_metrics = programs.learner(learner, pending)
                    actor, acted, actor_metrics = host_actor(actor, old_copy)
                else:
                    # Both are dispatched before either finishes; each waits only for its
                    # inputs.
                    actor, acted, actor_metrics = programs.actor(actor, copy)
                    learner, copy, learner_metrics = programs.learner(learner, pending)
                pending, copy = to_learner(acted), to_actor(copy)
                rows.append({**actor_metrics, **learner_metrics})
                if i >= 2:  # keep at most two updates in flight: bounded memory
                    jax.block_until_ready(rows[i - 2])
            state = pipeline.join(to_learner(actor), learner, programs.unpack_acted(pending))
            return state, _stack(rows, chunk_updates)

        return chunk


class _Programs(NamedTuple):
    """The compiled halves of one algorithm on two devices, with the packed transfers:
    ``actor(actor, packed copy) -> (actor, packed acted, metrics)`` and
    ``learner(learner, packed pending) -> (learner, packed copy, metrics)``, vmapped over
    seeds; ``pack_copy``, ``pack_acted`` and ``unpack_acted`` convert at a chunk's ends."""

    actor: Any
    learner: Any
    pack_copy: Callable
    pack_acted: Callable
    unpack_acted: Callable
    unpack_copy: Callable


def _compile_halves(pipeline, actor, copy, learner, pending) -> _Programs:
    """Compiles the two halves for seed-batched arguments placed on their devices."""

    def unbatched(tree):
        return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), tree)

    acted = (unbatched(pending) if pipeline.actor is None  # host actors: init's shapes
             else jax.eval_shape(pipeline.actor, unbatched(actor), unbatched(copy))[1])
    pack_copy, unpack_copy = packing.packer(unbatched(copy))
    pack_acted, unpack_acted = packing.packer(acted)

    def actor_half(actor, copy):
        actor, acted, metrics = pipeline.actor(actor, unpack_copy(copy))
        return actor, pack_acted(acted), metrics

    def learner_half(learner, pending):
        learner, copy, metrics = pipeline.learner(learner, unpack_acted(pending))
        return learner, pack_copy(copy), metrics

    pack_copies, pack_batches, unpack_batches, unpack_copies = (
        jax.jit(jax.vmap(f)) for f in (pack_copy, pack_acted, unpack_acted, unpack_copy))
    return _Programs(
        None if pipeline.actor is None else jax.jit(jax.vmap(actor_half), donate_argnums=0)
        .lower(actor, pack_copies(copy)).compile(),
        jax.jit(jax.vmap(learner_half), donate_argnums=0).lower(
            learner, pack_batches(pending)).compile(),
        pack_copies, pack_batches, unpack_batches, unpack_copies)


def _stack(rows: list[dict[str, jax.Array]], length: int) -> dict[str, np.ndarray]:
    """Per-update metric dicts of ``[S]`` arrays as one dict of ``[S, length]`` arrays,
    zero-padded past ``len(rows)``."""
    out = {}
    for name in rows[0]:
        values = np.stack([np.asarray(r[name]) for r in rows], axis=1)
        pad = np.zeros(values.shape[:1] + (length - values.shape[1],), values.dtype)
        out[name] = np.concatenate([values, pad], axis=1)
    return out
