"""The memory check before training: state sizes from shapes, free memory per platform
(and under a cgroup limit), and the error that names the largest parts before anything
is compiled."""

import os

import jax
import jax.numpy as jnp
import pytest

from jaxrl_par.algos import dqn
from jaxrl_par.runner import memory, programs
from jaxrl_par.runner import training as train_lib


class _Device:
    """Stands in for a ``jax.Device`` with ``free_bytes`` free."""

    def __init__(self, platform, free_bytes, index=0):
        self.platform, self.free_bytes, self.id, self.process_index = (
            platform, free_bytes, index, 0)

    def memory_stats(self):
        return {"bytes_limit": self.free_bytes + 100, "bytes_in_use": 100}

    def __str__(self):
        return f"{self.platform}:{self.id}"


STATE = {"buffer": jax.ShapeDtypeStruct((4, 1000, 205), jnp.uint32),  # 3,280,000 bytes
         "params": jnp.zeros((10,), jnp.float32),                       # 40
         "key": jax.random.split(jax.random.key(0), 4)}                 # 4 keys, 32


def test_tree_bytes_counts_abstract_and_concrete_leaves_and_keys():
    assert memory.tree_bytes(STATE) == 3_280_000 + 40 + 32


def test_free_bytes_on_cpu_reads_memavailable(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       32000000 kB\nMemAvailable:   1000 kB\n")
    cpu = jax.devices("cpu")[0]
    no_cgroup = str(tmp_path / "no-cgroup")
    assert memory.free_bytes(cpu, str(meminfo), no_cgroup) == 1000 * 1024
    assert memory.free_bytes(cpu, str(tmp_path / "missing"), no_cgroup) is None
    accel = _Device("gpu", 5_000)
    assert memory.free_bytes(accel) == 5_000


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_limit_v1_and_v2_smallest_over_ancestors(tmp_path):
    # A SLURM job's --mem (or a container's limit) caps what CPU devices may use, whatever
    # the host has free. v2: memory.max of the cgroup and its ancestors ("max": none).
    proc = tmp_path / "cgroup"
    _write(proc, "0::/slurm/job_7/step_0\n")
    root = tmp_path / "fs"
    _write(root / "slurm" / "job_7" / "step_0" / "memory.max", "max\n")
    _write(root / "slurm" / "job_7" / "memory.max", "8589934592\n")  # 8 GiB on the job
    _write(root / "slurm" / "memory.max", "17179869184\n")
    assert memory.cgroup_limit(str(proc), str(root)) == 8 << 30
    # v1: the memory controller's hierarchy; "no limit" is a number near 2^63
    _write(proc, "4:memory:/docker/abc\n3:cpuset:/\n")
    _write(root / "memory" / "docker" / "abc" / "memory.limit_in_bytes", "9223372036854771712\n")
    _write(root / "memory" / "docker" / "memory.limit_in_bytes", "4294967296\n")
    assert memory.cgroup_limit(str(proc), str(root)) == 4 << 30
    _write(root / "memory" / "docker" / "memory.limit_in_bytes", "9223372036854771712\n")
    assert memory.cgroup_limit(str(proc), str(root)) is None
    # CPU devices get the smaller of MemAvailable and the limit
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemAvailable:   16777216 kB\n")  # 16 GiB
    _write(root / "memory" / "docker" / "memory.limit_in_bytes", "4294967296\n")
    cpu = jax.devices("cpu")[0]
    assert memory.free_bytes(cpu, str(meminfo), str(proc), str(root)) == 4 << 30
    assert memory.free_bytes(cpu, str(meminfo), str(tmp_path / "none"), str(root)) == 16 << 30


def test_check_fits_per_accelerator_and_per_host():
    free = memory.free_bytes
    # two accelerators hold half each: 1.64 MB fits in 2 MB, not in 1 MB
    memory.check_fits(STATE, [_Device("gpu", 2_000_000, i) for i in range(2)], free=free)
    with pytest.raises(ValueError, match=r"needs 1\.6 MB on gpu:0.*Largest parts: "
                       r"\['buffer'\] \[4, 1000, 205\] uint32 \(3\.1 MB\).*--devices"):
        memory.check_fits(STATE, [_Device("gpu", 1_000_000, i) for i in range(2)], free=free)
    # CPU devices share the host's memory: two of them need the whole state there
    cpus = [_Device("cpu", 2_000_000, i) for i in range(2)]
    def free(d):  # memory.free_bytes would read this host's
        return d.free_bytes

    with pytest.raises(ValueError, match=r"needs 3\.1 MB on 2 CPU device\(s\)") as e:
        memory.check_fits(STATE, cpus, free=free)
    assert "--devices" not in str(e.value)  # more CPU devices would not help
    memory.check_fits(STATE, cpus, free=lambda d: None)  # unknown: not checked


def test_train_refuses_a_state_too_large_before_compiling(monkeypatch):
    # 4 seeds of a 10^8-slot MinAtar replay: 328 GB, more than any machine this runs on
    def no_build(*args, **kwargs):
        raise AssertionError("compiled or allocated before the memory check")

    monkeypatch.setattr(programs, "_build", no_build)
    algo = dqn.make(dqn.Config(env="Breakout-MinAtar", buffer_size=10**8))
    with pytest.raises(ValueError, match=r"the state of 4 seed\(s\) needs 305\.5 GB .*"
                       r"\.buffer\.words \[4, 100000000, 205\] uint32 .*buffer_size"):
        train_lib.train(algo, [0, 1, 2, 3], progress=False)
    with pytest.raises(AssertionError, match="before the memory check"):
        train_lib.train(algo, [0, 1, 2, 3], progress=False, check_memory=False)


class _Compiled:
    """Stands in for a compiled program with the compiler's memory figures."""

    def __init__(self, output, alias, temp):
        self.stats = type("Stats", (), {"output_size_in_bytes": output,
                                        "alias_size_in_bytes": alias,
                                        "temp_size_in_bytes": temp})()

    def memory_analysis(self):
        return self.stats


def test_check_program_counts_outputs_beyond_donated_inputs_and_temporaries():
    # a chunk: 3 MB out, 2.5 MB of it written over the donated input, 0.25 MB of
    # temporaries: 3,000,000 - 2,500,000 + 250,000 = 750,000 bytes more per device
    # (and HEADROOM, 256 MiB = 268,435,456 bytes, left free)
    chunk = _Compiled(3_000_000, 2_500_000, 250_000)
    assert memory.program_bytes(chunk) == 750_000
    room = memory.HEADROOM
    assert room == 268_435_456
    memory.check_program(chunk, [_Device("gpu", 750_000 + room)], "a chunk")
    with pytest.raises(ValueError, match=r"^a chunk allocates 732\.4 KB more on gpu:0 "
                       r"\(and leaves 256\.0 MB free\), but 256\.7 MB is free there"):
        memory.check_program(chunk, [_Device("gpu", 749_999 + room)], "a chunk")
    # two CPU devices share the host: 2 x 750,000 = 1,500,000 bytes, plus the host copy
    # a checkpoint takes of the state (1,000,000): 2.5 MB
    cpus = [_Device("cpu", 2_400_000 + room, i) for i in range(2)]

    def free(d):
        return d.free_bytes

    memory.check_program(chunk, cpus, "a chunk", free=free)
    with pytest.raises(ValueError, match=r"allocates 2\.4 MB more on 2 CPU device\(s\)"):
        memory.check_program(chunk, cpus, "a chunk", free=free, host_bytes=1_000_000)
    # a backend without figures is not checked
    memory.check_program(object(), [_Device("gpu", 0)], "a chunk")
    memory.check_program(chunk, [_Device("gpu", 0)], "a chunk", free=lambda d: None)


def test_check_fits_counts_the_checkpoints_host_copy_on_cpu_only():
    def free(d):
        return d.free_bytes

    # 3,280,072 bytes of state and one host copy: 6.3 MB on the host, more than 5 MB
    with pytest.raises(ValueError, match=r"the state and 1 host copy of it needs 6\.3 MB"):
        memory.check_fits(STATE, [_Device("cpu", 5_000_000)], "the state", free=free,
                          host_copies=1)
    memory.check_fits(STATE, [_Device("cpu", 5_000_000)], "the state", free=free)
    # an accelerator's state is checked against its own memory; the copy is the host's
    memory.check_fits(STATE, [_Device("gpu", 3_300_000)], "the state", free=free,
                      host_copies=1)


# A child process: DQN on CartPole with a replay sized to FRACTION of a BUDGET of bytes,
# the memory check seeing BUDGET minus what the process has grown since it started as
# free; prints the state's bytes, the peak growth of the resident set and the refusal.
PEAK_CHILD = """
import json, resource, sys
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
budget, fraction, log_dir, check = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], \\
    sys.argv[4] == "1"
import os

import jax
import jaxrl_par
from jaxrl_par.algos import dqn
from jaxrl_par.runner import memory
jax.devices()
base = rss()
memory.free_bytes = lambda device, *a, **k: budget - (rss() - base)
def state_bytes(n, **kw):
    algo = dqn.make(dqn.Config(env="CartPole-v1", buffer_size=n, **kw))
    return algo, memory.tree_bytes(jax.eval_shape(algo.init, jax.random.key(0)))
row = state_bytes(2000)[1] - state_bytes(1000)[1]  # bytes of 1000 replay rows
n = int((fraction * budget - state_bytes(1000)[1]) / row * 1000) + 1000
algo, size = state_bytes(n, total_timesteps=4000, learning_starts=1000)
try:
    jaxrl_par.train(algo, seeds=1, progress=False, check_memory=check,
                    log_dir=None if log_dir == "-" else log_dir)
    refused = None
except ValueError as e:
    refused = str(e)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
print(json.dumps({"state": size, "peak": peak, "refused": refused}))
"""


def _peak(budget, fraction, log_dir, check):
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", PEAK_CHILD, str(budget), str(fraction),
                          str(log_dir), "1" if check else "0"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc (Linux)")
@pytest.mark.parametrize("fraction", [0.4, 0.6, 0.9])
@pytest.mark.parametrize("checkpoints", [False, True])
def test_a_run_the_check_passes_fits_and_one_it_refuses_would_not(tmp_path, fraction,
                                                                   checkpoints):
    # Replays of 40%, 60% and 90% of a 2 GB budget: a run the check lets through peaks
    # within the budget; one it refuses comes within the check's headroom of it, or
    # beyond, when run unchecked.
    budget = 2 * 10**9
    log_dir = tmp_path / "run" if checkpoints else "-"
    got = _peak(budget, fraction, log_dir, check=True)
    assert abs(got["state"] - fraction * budget) < 0.01 * budget
    if got["refused"] is None:
        assert got["peak"] <= budget, got
    else:
        assert "allocates" in got["refused"] or "needs" in got["refused"]
        unchecked = _peak(budget, fraction, tmp_path / "unchecked" if checkpoints else "-",
                          check=False)
        assert unchecked["refused"] is None, unchecked
        assert unchecked["peak"] > budget - memory.HEADROOM, unchecked
    if fraction == 0.4 and not checkpoints:
        assert got["refused"] is None  # room for the state, the compile and the chunk
    if fraction == 0.9:
        assert got["refused"] is not None
