"""Multi-device and multi-host training: the ``('pop', 'data')`` mesh, sharded runner
pieces, replication checks, multi-host start-up and a globally sampled replay.

>>> from jaxrl_par import parallel
>>> mesh = parallel.make_mesh(devices=1, pop=1)   # ('pop', 'data') = (1, 1)
"""

from jaxrl_par.parallel.data_parallel import (
    STATE_SPEC,
    Sharded,
    check_algorithm,
    make_chunk_fn,
    make_init,
    place,
    to_host,
    unreplicate,
)
from jaxrl_par.parallel.distributed import initialize, is_main_process
from jaxrl_par.parallel.mesh import MeshShape, make_mesh, mesh_shape, shape_of
from jaxrl_par.parallel.replication import (
    REPLICATED_FIELDS,
    ReplicationError,
    assert_is_replicated,
    replica_spread,
    select_fields,
)
from jaxrl_par.replay.global_sample import ShardSample, sample_global  # re-exported

__all__ = [
    "REPLICATED_FIELDS",
    "STATE_SPEC",
    "MeshShape",
    "ReplicationError",
    "ShardSample",
    "Sharded",
    "assert_is_replicated",
    "check_algorithm",
    "initialize",
    "is_main_process",
    "make_chunk_fn",
    "make_init",
    "make_mesh",
    "mesh_shape",
    "place",
    "replica_spread",
    "sample_global",
    "select_fields",
    "shape_of",
    "to_host",
    "unreplicate",
]
