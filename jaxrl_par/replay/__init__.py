"""On-device replay: pure functions over a state pytree (optax style).

>>> from jaxrl_par import replay
>>> buf = replay.prioritized(capacity=2**10, alpha=0.6)   # or replay.uniform(capacity)

Outside jit, write with the state donated (``jax.jit(buf.add, donate_argnums=0)``):
a plain call copies the whole buffer (see :class:`Buffer`).
"""

from jaxrl_par.replay.global_sample import (
    ShardSample,
    WeightedBatch,
    batch_normalized_weights,
    sample_global,
    weighted_batch,
)
from jaxrl_par.replay.nstep import NStepTransitions, nstep_transitions
from jaxrl_par.replay.prioritized import PrioritizedState, prioritized, stratified_uniforms
from jaxrl_par.replay.storage import StorageState
from jaxrl_par.replay.sum_tree import SumMinTree
from jaxrl_par.replay.types import Buffer, Sample
from jaxrl_par.replay.uniform import UniformState, uniform

__all__ = [
    "Buffer",
    "NStepTransitions",
    "PrioritizedState",
    "Sample",
    "ShardSample",
    "StorageState",
    "SumMinTree",
    "UniformState",
    "WeightedBatch",
    "batch_normalized_weights",
    "nstep_transitions",
    "prioritized",
    "sample_global",
    "stratified_uniforms",
    "uniform",
    "weighted_batch",
]
