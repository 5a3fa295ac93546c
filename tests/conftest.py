import os
import tempfile

# Tests run on the CPU.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# XLA's multi-threaded Eigen pool on CPU can wedge: a vmapped program compiles, then
# block_until_ready never returns, with the process idle. Seen here in a full run on an
# idle 2-core machine (jax 0.10.2: a vmapped PPO init in test_train, py-spy showed it
# parked in block_until_ready; the CLI subprocess test failed in the same run), and
# reported upstream with this flag as the workaround (PyAutoFit issue 1530: 0 hangs in
# 12 runs with it, 14 in 16 without). Set before jax is imported, and
# inherited by the tests' subprocesses (8-device suite, two-host test, CLI).
EIGEN_FLAG = "--xla_cpu_multi_thread_eigen=false"
if EIGEN_FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + EIGEN_FLAG).strip()

import jax  # noqa: E402

# Many tests compile the same program more than once (a vmapped batch of seeds vs the
# same seeds one by one, a run and its resumption). XLA's persistent cache turns the
# repeats into loads. Correctness never depends on it.
jax.config.update("jax_compilation_cache_dir",
                  os.path.join(tempfile.gettempdir(), "jaxrl_par_test_xla_cache"))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
