import os

# Tests run on the CPU.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# XLA's multi-threaded Eigen pool on CPU can wedge: a vmapped program compiles, then
# block_until_ready never returns, with the process idle. Seen here in a full run on an
# idle 2-core machine (jax 0.10.2: a vmapped PPO init in test_train, py-spy showed it
# parked in block_until_ready; the CLI subprocess test failed in the same run), and
# reported upstream with this flag as the workaround (PyAutoFit issue 1530: 0 hangs in
# 12 runs with it, 14 in 16 without). Set before jax is imported, and
# inherited by the tests' subprocesses (8-device suite, two-host test, CLI).
#
# No persistent compilation cache: with it, a vmapped init loaded from the cache hung in
# block_until_ready twice in test_train (the second time with the flag above set), and
# jax issue 38445 reports the CPU cache's reload path as broken on jax 0.10.
EIGEN_FLAG = "--xla_cpu_multi_thread_eigen=false"
if EIGEN_FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + EIGEN_FLAG).strip()
