"""Multi-host start-up: one process per host (or per GPU), one global device mesh.

After :func:`initialize`, ``jax.devices()`` lists the devices of every process and
:func:`jaxrl_par.parallel.make_mesh` spans them all; each process runs the same
program on its own devices (multi-controller SPMD). Environment keys need no
``fold_in(process_index)``: algorithms derive them from the *global* env index through
``jax.lax.axis_index``, which counts across processes, so a shard's envs are the same
whichever process holds it, and a run on 2 hosts x 4 GPUs equals one on 8 GPUs.
"""

from __future__ import annotations

import jax


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    local_device_ids: list[int] | None = None,
) -> None:
    """Joins the processes of a multi-host run (``jax.distributed.initialize``).

    With no arguments the cluster is auto-detected (SLURM, Open MPI, TPU pod slices, ...);
    otherwise give all three of ``coordinator_address`` (``"host:port"`` of process 0),
    ``num_processes`` and ``process_id``. Must run before anything touches a device.
    On CPU the collectives between processes go through gloo. Calling it twice is a
    no-op.
    """
    if jax.distributed.is_initialized():
        return
    explicit = (coordinator_address, num_processes, process_id)
    if any(v is not None for v in explicit) and any(v is None for v in explicit):
        raise ValueError(
            f"give all of coordinator_address={coordinator_address!r}, num_processes="
            f"{num_processes!r}, process_id={process_id!r}, or none of them (auto-detect)"
        )
    if num_processes is not None and not 0 <= process_id < num_processes:
        raise ValueError(f"process_id={process_id} is not in [0, num_processes={num_processes})")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(
            coordinator_address=coordinator_address,
            num_processes=num_processes,
            process_id=process_id,
            local_device_ids=local_device_ids,
        )
    except RuntimeError as e:
        if "must be called before" not in str(e):
            raise
        raise RuntimeError(
            "multi-host start-up came too late: a JAX array was already created in this "
            "process. gymnax 1.0.1 creates arrays when it is imported (gymnax/environments/"
            "misc/frozen_lake.py), so join the hosts before importing gymnax or any "
            "jaxrl_par module that imports it: call jax.distributed.initialize(...) (after "
            "jax.config.update('jax_cpu_collectives_implementation', 'gloo') on CPU) first. "
            f"JAX said: {e}"
        ) from e


def is_main_process() -> bool:
    """True on process 0, the one that writes logs and checkpoints."""
    return jax.process_index() == 0
