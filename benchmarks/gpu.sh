#!/usr/bin/env bash
# One prepared accelerator run: installs the carried wheels, then runs the scaling
# benchmark, a brief PPO benchmark and Ape-X's actor-learner benchmark; results go to
# $OUT (if set) or benchmarks/results.
#
#   bash benchmarks/gpu.sh --prepare   # here, with network: fetch gymnax + six wheels into .whl/
#   bash benchmarks/gpu.sh             # on the GPU machine (jax 0.11.x, Python 3.12; carry .whl)
#   bash benchmarks/gpu.sh --quick     # tiny settings; on CPU it splits the host into 2 devices
#
# The GPU image has jax but not gymnax/six: they travel as wheels in .whl/ (git-ignored;
# pass it in `carry`). Nothing is downloaded on the accelerator machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
command -v "$PY" >/dev/null || PY=python
QUICK=""
for arg in "$@"; do
  case "$arg" in
    --quick) QUICK="--quick" ;;
    --prepare)
      "$PY" -m pip download --no-deps --only-binary=:all: -d .whl "gymnax==1.0.1" six
      ls -l .whl; exit 0 ;;
    *) echo "unknown argument $arg (use --quick or --prepare)" >&2; exit 2 ;;
  esac
done
DEST="${OUT:-benchmarks/results}"
mkdir -p "$DEST"

if ! "$PY" -c "import gymnax, six" 2>/dev/null; then
  if ! ls .whl/*.whl >/dev/null 2>&1; then
    echo "gymnax/six missing and no .whl/: run 'bash benchmarks/gpu.sh --prepare' first" >&2
    exit 1
  fi
  "$PY" -m pip install --quiet --no-deps --no-index .whl/*.whl
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$PY" - <<'PYEOF' 2>&1 | tee "$DEST/gpu_env.txt"
import sys, jax, flax, optax, gymnax
print("python", sys.version.split()[0], "jax", jax.__version__, "flax", flax.__version__,
      "optax", optax.__version__, "gymnax", getattr(gymnax, "__version__", "?"))
print("backend", jax.default_backend(), "devices", jax.devices())
PYEOF

BACKEND="$("$PY" -c 'import jax; print(jax.default_backend())')"
FAKE=""
if [ "$BACKEND" = "cpu" ]; then FAKE="--fake-devices 2"; fi

status=0
# 1. Scaling: weak, strong, population (and Ape-X if present).
"$PY" benchmarks/scaling.py $QUICK $FAKE --out "$DEST/scaling.json" 2>&1 | tee "$DEST/scaling.log" \
  || status=1

# 2. PPO throughput, briefly: the runner on one device (steps/s excludes compilation).
if [ -n "$QUICK" ]; then PPO_SET=(--set num_envs=8 --set num_steps=16 --total-timesteps 2048)
else PPO_SET=(--set num_envs=2048 --set num_steps=64 --total-timesteps 2e7); fi
"$PY" -m jaxrl_par.cli train ppo "${PPO_SET[@]}" --chunks 4 --no-progress --json \
  2>&1 | tee "$DEST/ppo_train.log" || status=1
tail -n 1 "$DEST/ppo_train.log" > "$DEST/ppo_train.json" || true

# 3. Side by side with rejax when it is installed (benchmarks/ppo.py needs it).
if "$PY" -c "import rejax" 2>/dev/null; then
  "$PY" benchmarks/ppo.py --quick --out "$DEST/ppo.json" 2>&1 | tee "$DEST/ppo.log" || status=1
else
  echo "benchmarks/ppo.py skipped: rejax not installed" | tee "$DEST/ppo.log"
fi
# 4. Ape-X's actors and learner at once (jaxrl_par.parallel.actor_learner): on one GPU
#    the two halves share it; with --actor-device cpu the actors run on the host CPU.
if [ -n "$QUICK" ]; then AL_SET=(--quick); else AL_SET=(--seeds 1,8 --repeats 3 --updates 20); fi
"$PY" benchmarks/actor_learner.py "${AL_SET[@]}" --out "$DEST/actor_learner.json" \
  2>&1 | tee "$DEST/actor_learner.log" || status=1
"$PY" benchmarks/actor_learner.py "${AL_SET[@]}" --actor-device cpu \
  --out "$DEST/actor_learner_cpu_actors.json" 2>&1 | tee "$DEST/actor_learner_cpu_actors.log" \
  || status=1
echo "results in $DEST (status $status)"
exit $status
