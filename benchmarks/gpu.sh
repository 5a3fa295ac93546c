#!/usr/bin/env bash
# One prepared accelerator run: installs the carried wheels, then runs each section under a
# time cap of its own, so that one slow or failing section costs only its cap and the
# others still report. Logs and JSON go to $OUT (if set) or benchmarks/results/gpu/.
#
#   bash benchmarks/gpu.sh --prepare   # here, with network: wheels for Python 3.12 into .whl/
#   bash benchmarks/gpu.sh             # on the GPU machine (jax 0.11.x, Python 3.12; carry .whl)
#   bash benchmarks/gpu.sh --quick     # tiny settings, to check the script on CPU first
#   SECTIONS="tests ppo" bash benchmarks/gpu.sh   # a subset, in the order given
#
# On a remote accelerator: `--prepare` here, then `bash benchmarks/gpu.sh` there with .whl/
# copied along; the default sections end within their caps, about 9 minutes in all.
#
# Sections (default: tests xla kernels ppo dqn; their caps sum to ~9 min, so with a machine's
# start-up they fill most of a 15-minute device budget, and one command may run 10 min):
#   tests        pytest of the env, network and platform tests on the accelerator
#   xla          the README job with XLA's default command buffers against ones that also take
#                loops and conditionals (XLA_FLAGS=--xla_gpu_enable_command_buffer=...,WHILE)
#   kernels      benchmarks/kernel_counts.py: kernel launches per PPO update, ours and rejax
#   cli          the README's PPO job, then PPO at 2048 envs (steps/s, compile seconds)
#   apex         `jaxrl-par train apex` (CartPole defaults): prioritized replay end to end
#                (not in the default)
#   ppo          benchmarks/ppo.py: ours vs rejax vs the random-action ceiling
#   dqn          benchmarks/apex.py --speed-only: our DQN vs rejax's DQN, env steps/s
#   replay       benchmarks/replay.py --in-scan at capacity 2^20: ours vs flashbax, the adds
#                alone first (not in the default: its builds at 2^20 are slow)
#   scaling      benchmarks/scaling.py (weak/strong/population)
#   minatar      `jaxrl-par train ppo` on Breakout-MinAtar with its CNN torso at 64 and 1024
#                envs, through the runner (seeds vmapped), as users run it (not in the
#                default)
#   continuous   benchmarks/continuous.py: PPO on Pendulum-v1, ours vs rejax, 8 seeds (not in
#                the default)
#   actor_learner benchmarks/actor_learner.py (Ape-X's actors and learner at once)
#   sweep        benchmarks/sweep.py --algos ppo: eight learning rates as one vmapped sweep,
#                against eight runs and against rejax's vmapped sweep (not in the default)
#   impala       benchmarks/impala.py: IMPALA beside PPO on CartPole and Breakout-MinAtar, and
#                the policy-lag table (not in the default)
#   sac          benchmarks/sac.py: our SAC vs rejax's SAC on Pendulum-v1 (not in the default)
#   brax         benchmarks/brax_ppo.py: our PPO against Brax's own PPO trainer on Brax's
#                fast, inverted_pendulum and ant (positional backend) at 2048 envs, then
#                benchmarks/brax_sac.py: SAC against Brax's SAC trainer (not in
#                the default; its wheel set was checked in a Python 3.12 venv of jax
#                0.11.2, flax, optax, chex, matplotlib and seaborn, as the image has them)
#   compare      `jaxrl-par compare` on CartPole, 4 seeds, target 475: every paradigm that
#                runs on one device, with its defaults (not in the default)
#
# The GPU image has jax, flax, optax, chex, six and tqdm but not gymnax, rejax, flashbax,
# brax and their needs: they travel as wheels in .whl/ (git-ignored; name it in `carry`) and are
# installed into /tmp/site. Nothing is downloaded on the accelerator machine. At most 8
# files come back from $OUT, so everything is written to gpu.log and a few JSON files.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
command -v "$PY" >/dev/null || PY=python
QUICK=""
WHEELS=(gymnax==1.0.1 gymnasium==1.3.0 farama-notifications==0.0.6 rejax==0.1.3
        distrax==0.1.9 tfp-nightly==0.26.0.dev20261027 dm-tree==0.1.10 gast==0.7.0
        decorator==5.3.1 flashbax==0.1.3
        brax==0.14.2 mujoco==4.0.1 mujoco-core==4.0.1 mujoco-mjx==3.17.0 ml-collections==1.1.0
        trimesh==5.2.0 jaxopt==0.8.5)
for arg in "$@"; do
  case "$arg" in
    --quick) QUICK="--quick" ;;
    --prepare)
      plat=()
      for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 \
               manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
        plat+=(--platform "$p"); done
      "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp "${plat[@]}" -d .whl "${WHEELS[@]}" || exit 1
      ls -l .whl; exit 0 ;;
    *) echo "unknown argument $arg (use --quick or --prepare)" >&2; exit 2 ;;
  esac
done
DEST="${OUT:-benchmarks/results/gpu}"
mkdir -p "$DEST"
LOG="$DEST/gpu.log"
: > "$LOG"
say() { echo "$@" | tee -a "$LOG"; }

if ! "$PY" -c "import gymnax, six, rejax, flashbax, brax" 2>/dev/null; then
  if ! ls .whl/*.whl >/dev/null 2>&1; then
    say "gymnax/rejax/flashbax/brax missing and no .whl/: run 'bash benchmarks/gpu.sh --prepare' first"
    exit 1
  fi
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl 2>&1 | tee -a "$LOG"
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm \
    --format=csv 2>/dev/null; nproc; } 2>&1 | tee -a "$LOG"
"$PY" - <<'PYEOF' 2>&1 | tee -a "$LOG"
import sys, jax, flax, optax, gymnax
print("python", sys.version.split()[0], "jax", jax.__version__, "flax", flax.__version__,
      "optax", optax.__version__)
print("backend", jax.default_backend(), "devices", jax.devices())
PYEOF

status=0
# section NAME CAP_SECONDS COMMAND...: runs COMMAND under `timeout`, output into the log.
section() {
  local name="$1" cap="$2"; shift 2
  say ""; say "=== $name (cap ${cap}s) $(date -u +%H:%M:%S)"
  local t0=$SECONDS
  timeout -k 5 "$cap" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  say "=== $name rc=$rc wall=$((SECONDS - t0))s"
  [ "$rc" = 0 ] || status=1
}

if [ -n "$QUICK" ]; then
  PPO_SETTINGS="${PPO_SETTINGS:-CartPole-v1:4}"; PPO_REP=2; BIG=(--set num_envs=8 --set num_steps=16 --total-timesteps 2048)
  CAPS=(120 60 120 120 120)
  RCAP=(--capacities 65536 --kinds cartpole --repeats 2 --calls 3 --scan-length 8)
  AB_SETTINGS="CartPole-v1:4"; AB_ROUNDS=3
  MINATAR_ENVS="8 16"; MINATAR_STEPS=4096
else
  AB_SETTINGS="CartPole-v1:4,CartPole-v1:4096"; AB_ROUNDS=7
  MINATAR_ENVS="64 1024"; MINATAR_STEPS=1e6
  # One compile round per PPO setting, to fit the section's cap.
  PPO_SETTINGS="${PPO_SETTINGS:-CartPole-v1:4,CartPole-v1:4096}"; PPO_REP=3
  BIG=(--set num_envs=2048 --set num_steps=64 --set num_minibatches=32 --total-timesteps 1e7)
  # Replay: the adds first, alone, and few calls of a short scan, so that its slow builds
  # at 2^20 still leave rows within the caps.
  CAPS=(60 45 200 45 100)
  RCAP=(--capacities 1048576 --kinds minatar --repeats 2 --calls 3 --scan-length 8)
fi
for s in ${SECTIONS:-tests xla kernels ppo dqn}; do
  case "$s" in
    tests) section tests "${CAPS[0]}" "$PY" -m pytest -q -x -p no:cacheprovider \
             tests/test_envs.py tests/test_networks.py tests/test_platform.py ;;
    cli)
      section cli_default "${CAPS[1]}" "$PY" -m jaxrl_par train ppo --no-progress --json \
        ${QUICK:+--total-timesteps 4096}
      section cli_2048 "${CAPS[1]}" "$PY" -m jaxrl_par train ppo "${BIG[@]}" --chunks 4 \
        --no-progress --json ;;
    xla)
      # The README job, alternated: XLA's default command buffers against ones that also
      # take loops (WHILE) and conditionals, so a whole loop can run as one CUDA graph
      # instead of a host round trip per iteration (the 4-env update is latency-bound).
      section xla 100 bash -c '
        flags_while="--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,CONDITIONAL,WHILE"
        for r in 1 2; do for v in default while; do
          if [ $v = while ]; then f="$flags_while"; else f=""; fi
          echo "xla $v round $r: $(XLA_FLAGS="$f" "$0" -m jaxrl_par train ppo --no-progress --json \
            --no-compile-cache $1 2>/dev/null | tail -1)"
        done; done' "$PY" "${QUICK:+--total-timesteps 4096}" ;;
    kernels) section kernels 60 "$PY" benchmarks/kernel_counts.py --settings "$AB_SETTINGS" \
               --out "$DEST/kernel_counts.json" ;;
    apex) section apex 60 "$PY" -m jaxrl_par train apex --no-progress --json \
            ${QUICK:+--total-timesteps 4096} ;;
    ppo) section ppo "${CAPS[2]}" "$PY" benchmarks/ppo.py --settings "$PPO_SETTINGS" \
           --repeats "$PPO_REP" --compile-rounds 1 --out "$DEST/ppo.json" ;;
    dqn) section dqn "${CAPS[3]}" "$PY" benchmarks/apex.py --speed-only --repeats 2 ;;
    replay)
      section replay_add 60 "$PY" benchmarks/replay.py --in-scan --add-only --progress "${RCAP[@]}" \
        --skip-any-size --out "$DEST/replay_add.json"
      section replay "${CAPS[4]}" "$PY" benchmarks/replay.py --in-scan --progress "${RCAP[@]}" \
        --skip-any-size --out "$DEST/replay.json" ;;
    scaling) section scaling 300 "$PY" benchmarks/scaling.py $QUICK \
               --out "$DEST/scaling.json" ;;
    continuous) section continuous 120 "$PY" benchmarks/continuous.py \
                  ${QUICK:+--seeds 2 --total-timesteps 2e4} --out "$DEST/continuous.json" ;;
    minatar) section minatar 150 bash -c '
        for n in $2; do
          echo "minatar ppo $n envs: $("$0" -m jaxrl_par train ppo --env Breakout-MinAtar \
            --set num_envs=$n --total-timesteps $1 --no-progress --json 2>/dev/null | tail -1)"
        done' "$PY" "$MINATAR_STEPS" "$MINATAR_ENVS" ;;
    sweep) if [ -n "$QUICK" ]; then SW=(--total-timesteps 20000 --repeats 1)
           else SW=(--total-timesteps 100000 --repeats 3); fi
           section sweep 150 "$PY" benchmarks/sweep.py --algos ppo "${SW[@]}" \
             --out "$DEST/sweep.json" ;;
    impala) section impala 240 "$PY" benchmarks/impala.py ${QUICK:+--quick} \
              ${QUICK:---repeats 1} --out "$DEST/impala.json" ;;
    sac) section sac 240 "$PY" benchmarks/sac.py ${QUICK:+--steps 6000 --repeats 1 --seeds 1} \
           --out "$DEST/sac.json" ;;
    brax) if [ -n "$QUICK" ]; then BX=(--envs fast --num-envs 128 --scale 0.1 --repeats 1 --epochs 3)
          else BX=(--num-envs 2048 --scale 4 --repeats 2); fi
          section brax 300 "$PY" benchmarks/brax_ppo.py "${BX[@]}" --out "$DEST/brax_ppo.json"
          if [ -n "$QUICK" ]; then SX=(--envs fast --scale 0.1 --repeats 1 --epochs 3)
          else SX=(--repeats 2); fi
          section brax_sac 200 "$PY" benchmarks/brax_sac.py "${SX[@]}" --out "$DEST/brax_sac.json" ;;
    compare) section compare 240 "$PY" -m jaxrl_par compare ppo a2c a3c a3c@threads impala \
               dqn apex gorila --seeds 4 --target 475 --no-progress --no-compile-cache \
               ${QUICK:+--total-timesteps 4096} --out "$DEST/compare.json" ;;
    actor_learner) section actor_learner 300 "$PY" benchmarks/actor_learner.py \
                     ${QUICK:---seeds 1,8 --repeats 3 --updates 20} \
                     --out "$DEST/actor_learner.json" ;;
    *) say "unknown section $s"; status=1 ;;
  esac
done
say ""; say "results in $DEST (status $status) $(date -u +%H:%M:%S)"
exit $status
