"""On-device replay: pure functions over a state pytree (optax style).

>>> from jaxrl_par import replay
>>> buf = replay.prioritized(capacity=2**10, alpha=0.6)   # or replay.uniform(capacity)
"""

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
    "StorageState",
    "SumMinTree",
    "UniformState",
    "nstep_transitions",
    "prioritized",
    "stratified_uniforms",
    "uniform",
]
