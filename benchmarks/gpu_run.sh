#!/usr/bin/env bash
# The GPU proof of issue #36, by tiers, each step under its own time limit, on the lent GPU machine:
#
#   bash benchmarks/gpu_run.sh TIER...               # e.g. tier0; tf-check tests; resnet records
#   bash benchmarks/gpu_run.sh --dry-run [TIER...]   # here, on CPU (also GPU_RUN_DRY_RUN=1): all tiers by default
#   bash benchmarks/gpu_run.sh --list                # the tiers and their steps' time limits
#
# Tiers, in order of value (`python -m benchmarks.gpu_calls` prints the calls; benchmarks/RESULTS.md, "The GPU
# proof in 15 minutes", has the plan):
#   tier0          no TensorFlow: nvidia-smi; python -m trainer.gpu_check with the GPU count (passes) and one
#                  too many (fails, in bounded time, with one line); the node boot's health check, which builds
#                  stacks/components/node_boot/gpu_compute_check.cu with nvcc for the GPU's own architecture and
#                  runs it; torchvision ResNet-50 (AMP, channels-last, eager) while the NVML monitor samples
#   tf-check       TensorFlow (from $TF_ENV) sees the GPUs, the trainer's check passes, first-call (PTX JIT) times
#   tests          the gpu-marked tests
#   resnet         the trainer's ResNet-50 (bf16, XLA) on a batch kept on the GPU vs torchvision eager, same step
#   records        the trainer's ResNet-50 from raw-pixel records on local disk (ratio: resnet's synthetic)
#   jit            the trainer's first step with an empty, then the filled CUDA JIT cache (bf16)
#   fp16-split     fp16's agreed loss scale on 2 logical GPUs of the card, then a small fp16 fit there
#   serve          serve mode: /ping, p50/p99 at 1, 8 and 32 concurrent requests, batching on and off
#   torch-compile  torchvision with torch.compile (its first step holds the compile time)
# Each tier writes, as it goes, $OUT/<tier>.log (all it prints) and $OUT/<tier>.jsonl (a line per figure, and a
# line per step: rc, seconds, limit): two files a tier, and a call returns at most 8, so at most 4 tiers a call.
# OUT defaults to gpu-run-out; GPUS to what nvidia-smi lists; PYTHON to python3 (here: .venv/bin/python).
# shellcheck disable=SC2329  # the tiers are functions called by name ("tier_$tier"), and so are their helpers
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
repo=$PWD
script=benchmarks/gpu_run.sh
tiers_in_order=(tier0 tf-check tests resnet records jit fp16-split serve torch-compile)
dry=${GPU_RUN_DRY_RUN:-0}
[[ $dry == 0 || $dry == 1 ]] || dry=1
list=0
requested=()
for arg in "$@"; do
  case $arg in
    --dry-run) dry=1 ;;
    --list) list=1 ;;
    -h | --help) sed -n '2,/^# shellcheck/p' "$script" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) requested+=("$arg") ;;
  esac
done
if ((${#requested[@]} == 0)); then
  ((dry || list)) || { echo "gpu_run: name the tiers to run: ${tiers_in_order[*]} (--help)" >&2; exit 2; }
  requested=("${tiers_in_order[@]}")
fi
for tier in "${requested[@]}"; do
  [[ " ${tiers_in_order[*]} " == *" $tier "* ]] || { echo "gpu_run: unknown tier '$tier' (${tiers_in_order[*]})" >&2; exit 2; }
done

out=${OUT:-gpu-run-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [[ -z ${PYTHON:-} && $dry == 1 && -x .venv/bin/python ]]; then PYTHON=$repo/.venv/bin/python; fi
python=${PYTHON:-python3}
TF_ENV=${TF_ENV:-/root/tf-env.sh}  # written by ../shared/gpu/stage-tensorflow's install.sh on the GPU machine
if ((dry)); then
  gpus=${GPUS:-1}
else
  gpus=${GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')}
  ((gpus > 0 || list)) || { echo "gpu_run: nvidia-smi lists no GPU here (use --dry-run on a machine without one)" >&2; exit 2; }
fi
batch=${RESNET_BATCH:-256}
repo_path=$repo/training_image:$repo
export PYTHONPATH=$repo_path${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-1} TF_FORCE_GPU_ALLOW_GROWTH=true
# The CUDA JIT cache outside $OUT (which comes back, 8 files at most), shared by the tiers of one machine.
export CUDA_CACHE_MAXSIZE=4294967296 CUDA_CACHE_PATH=${GPU_RUN_JIT_CACHE:-/tmp/gpu-run-cuda-cache}
# Load a module's kernels on first use, not all at a context's creation (less start time and GPU memory).
export CUDA_MODULE_LOADING=LAZY
# torchvision runs without TensorFlow's staged install on its path (its CUDA 12 libraries, its nvidia package).
torch_env=(env "PYTHONPATH=$repo_path")

now_ms() { date +%s%3N; }

# One line of the tier's jsonl (fields as key=value; numbers, true/false and null stay bare, the rest are strings).
record() {
  local line="{\"tier\":\"$tier\"" pair key value
  for pair in "$@"; do
    key=${pair%%=*} value=${pair#*=}
    if [[ $value =~ ^(-?(0|[1-9][0-9]*)(\.[0-9]+)?|true|false|null)$ ]]; then
      line+=",\"$key\":$value"
    else
      value=${value//\\/\\\\} value=${value//\"/\\\"}
      line+=",\"$key\":\"${value//$'\n'/ }\""
    fi
  done
  echo "$line}" >>"$jsonl"
}

# The content of FILE as one line of the tier's jsonl: JSON as it is, anything else as text.
attach() { # STEP FILE
  [[ -f $2 ]] || return 0
  "$python" - "$tier" "$1" "$2" >>"$jsonl" <<'PY'
import json, sys
tier, step, path = sys.argv[1:]
text = open(path).read()
try:
    content = json.loads(text)
except ValueError:
    content = text
print(json.dumps({"tier": tier, "step": step, "file": path.rsplit("/", 1)[-1], "content": content}))
PY
}

failed() { echo "$1" >>"$work/failed"; }  # the tier runs in a pipeline (its log): failures go through a file

# step NAME LIMIT_S CMD...: CMD under its own limit, printing into the tier's log as it goes, then a line
# {"step", "rc", "seconds", "limit_s", "timed_out"} in the tier's jsonl; a non-zero exit fails the tier unless
# may_fail=1 (the tier then judges the outcome with expect). Dry run: what CMD needs, checked, not run.
step() {
  local name=$1 limit=$2 start rc elapsed
  shift 2
  if ((list)); then printf '  %-26s %4ss  %s\n' "$name" "$limit" "$*"; return 0; fi
  if ((dry)); then
    check "$@"
    rc=$?
    record "step=$name" "limit_s=$limit" "dry_run=true" "rc=$rc" "command=$*"
    if ((rc == 0)); then echo "ok      $tier/$name (limit ${limit}s)"; else echo "FAILED  $tier/$name: $*"; failed "$name"; fi
    return "$rc"
  fi
  echo "== $tier/$name (limit ${limit}s): $*"
  start=$(now_ms)
  timeout -k 10 "$limit" "$@" </dev/null
  rc=$?
  elapsed=$(($(now_ms) - start))
  record "step=$name" "rc=$rc" "seconds=$((elapsed / 1000)).$(printf '%03d' $((elapsed % 1000)))" "limit_s=$limit" \
    "timed_out=$([[ $rc == 124 || $rc == 137 ]] && echo true || echo false)"
  echo "== $tier/$name: exit $rc after $((elapsed / 1000)) s"
  ((rc == 0 || ${may_fail:-0})) || failed "$name"
  return "$rc"
}

# A verdict the tier draws from its steps, as a line of the jsonl.
expect() { # NAME OK(0/1) DETAIL
  record "check=$1" "ok=$([[ $2 == 1 ]] && echo true || echo false)" "detail=$3"
  if [[ $2 == 1 ]]; then echo "ok: $1 ($3)"; else echo "NOT OK: $1 ($3)"; failed "$1"; fi
}

# resnet_bench exits 0 with a "skipped" row where TensorFlow sees no GPU: the tier wants its figures.
figures() { # FIGURE...
  local figure
  for figure in "$@"; do
    expect "figure-$figure" "$(grep -q "\"figure\": \"$figure\"" "$jsonl" && echo 1 || echo 0)" "measured into $tier.jsonl"
  done
}

# ---------------------------------------------------------------------------------------------------
# Dry run: everything a step needs short of the GPU.

# Imports MODULE and runs its main() until argparse has parsed ARGS, then stops (exit 0), or argparse's error.
argparse_check='
import argparse, runpy, sys
module, args = sys.argv[1], sys.argv[2:]
parse = argparse.ArgumentParser.parse_args
def parse_then_stop(self, *a, **k):
    parse(self, *a, **k)
    raise SystemExit(0)
argparse.ArgumentParser.parse_args = parse_then_stop
sys.argv = [module, *args]
runpy.run_module(module, run_name="__main__", alter_sys=True)
print(f"{module} ran to its end without parsing arguments"); sys.exit(3)'
# Runs MODULE as __main__ with TensorFlow, Keras and torch made unimportable.
without_tf='
import importlib.abc, runpy, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "keras", "tf_keras", "torch"):
            raise ImportError(f"{name} imported by a step that must run without it")
sys.meta_path.insert(0, Refuse())
sys.argv = sys.argv[1:]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)'

check() { # CMD...
  local -a cmd=("$@") envs=()
  if [[ ${cmd[0]} == env ]]; then
    cmd=("${cmd[@]:1}")
    while [[ ${cmd[0]} == *=* ]]; do envs+=("${cmd[0]}"); cmd=("${cmd[@]:1}"); done
  fi
  case ${cmd[0]} in
    "$python" | python3)
      [[ ${cmd[1]} == -m ]] || { echo "dry run: only 'python -m MODULE' steps are checked: ${cmd[*]}"; return 1; }
      check_module "${envs[@]}" -- "${cmd[@]:2}" ;;
    bash) bash -n "${cmd[1]}" || return 1
      [[ ${cmd[1]} != */health_check.sh ]] || check_health_check "${envs[@]}" ;;
    nvidia-smi) command -v timeout >/dev/null || { echo "dry run: timeout (coreutils) is missing"; return 1; } ;;
    *) command -v "${cmd[0]}" >/dev/null || { echo "dry run: ${cmd[0]} not found"; return 1; } ;;
  esac
}

check_module() { # VAR=VALUE... -- MODULE ARGS...
  local -a envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  local module=$1
  shift
  case $module in
    pytest)
      local -a args=() collected
      while (($#)); do if [[ $1 == -n ]]; then shift 2; else args+=("$1"); shift; fi; done
      mapfile -t collected < <(env "${envs[@]}" "$python" -m pytest --collect-only "${args[@]}" 2>&1 | grep -v '^$' | tail -n 1)
      printf '  %s\n' "${collected[@]}"
      [[ ${collected[*]} =~ ^([1-9][0-9]*)(/[0-9]+)?\ tests?\ collected ]] ;;
    trainer.gpu_check)  # runs for real without TensorFlow: no driver here, so it must fail at once, with one line
      local started=$SECONDS rc
      env "${envs[@]}" timeout 60 "$python" -c "$without_tf" "$module" "$@" >/dev/null 2>&1
      rc=$?
      "$python" -c 'import json, sys; r = json.load(open(sys.argv[1])); print("  " + (r.get("error") or "ok")); sys.exit(not ("ok" in r and (r["ok"] or r["error"])))' "$1" ||
        { echo "dry run: trainer.gpu_check wrote no result (exit $rc)"; return 1; }
      echo "  (exit $rc after $((SECONDS - started)) s, without TensorFlow or torch)" ;;
    *)
      env "${envs[@]}" "$python" -c "$argparse_check" "$module" "$@" || return 1
      local i
      for ((i = 1; i <= $#; i++)); do  # a command after --, run by this one (nvml-load)
        if [[ ${!i} == -- ]]; then check "${@:i+1}" || return 1; break; fi
      done ;;
  esac
}

# The node boot's health check with a fake nvidia-smi of an H100 (driver CUDA 13.0, compute capability 9.0): it
# must pick this machine's nvcc and build gpu_compute_check.cu for sm_90, as on a node; running it needs the GPU.
check_health_check() { # VAR=VALUE...
  local nvcc fake report log
  nvcc=$(command -v nvcc || true)
  [[ -n $nvcc || -x /usr/local/cuda/bin/nvcc ]] || { echo "  skipped: nvcc not found here: the sm_90 build is not checked"; return 0; }
  fake=$(mktemp -d)
  cat >"$fake/nvidia-smi" <<'SMI'
#!/usr/bin/env bash
if [[ $* == *--query-gpu=compute_cap* ]]; then echo 9.0
elif [[ $* == *--query-gpu=* ]]; then echo "0, GPU-00000000-0000-0000-0000-000000000000, NVIDIA H100 80GB HBM3, 580.159.04"
else echo "| NVIDIA-SMI 580.159.04    Driver Version: 580.159.04    CUDA Version: 13.0 |"; fi
SMI
  chmod +x "$fake/nvidia-smi"
  report=$fake/health.env log=$fake/health.log
  env "$@" PATH="$fake:$PATH" HEALTH_REPORT="$report" DCGMI_CMD=/nonexistent timeout 180 \
    bash stacks/components/node_boot/health_check.sh >"$log" 2>&1
  grep -E 'building the GPU computation' "$log" | sed 's/^/  /'
  if grep -q '^COMPUTE_CAPABILITY=9.0$' "$report" && grep -q '^CUDA_TOOLKIT=' "$report" &&
    grep -q 'for sm_90$' "$log" && grep -q '^REASON=gpu0-compute-failed' "$report"; then
    echo "  built for sm_90 as the boot builds it (running it needs the GPU: $(grep '^REASON=' "$report"))"
    rm -rf "$fake"
    return 0
  fi
  echo "dry run: the boot's CUDA check did not build for sm_90:"; sed 's/^/  /' "$report" "$log" | tail -n 12
  rm -rf "$fake"
  return 1
}

# The TensorFlow tiers read TensorFlow from the staged install: /root/tf-env.sh puts /root/tf-site on PYTHONPATH.
use_tensorflow() {
  ((list)) && return 0
  if ((dry)); then
    if [[ -f .gpu-stage/install.sh ]]; then
      if ! { bash -n .gpu-stage/install.sh && grep -q "PYTHONPATH=/root/tf-site" .gpu-stage/install.sh &&
        grep -q "> $TF_ENV" .gpu-stage/install.sh; }; then
        echo "FAILED  $tier: .gpu-stage/install.sh does not write $TF_ENV with /root/tf-site on PYTHONPATH"
        failed tf-env
        return 1
      fi
      echo "ok      $tier: .gpu-stage/install.sh writes $TF_ENV (PYTHONPATH=/root/tf-site), $(compgen -G '.gpu-stage/part-*' | wc -l) parts (the calls: python -m benchmarks.gpu_calls)"
    else
      echo "skipped $tier: no .gpu-stage/install.sh here (../shared/gpu/stage-tensorflow writes it)"
    fi
    # Once a dry run: a CPython 3.12 with numpy (and rich), as the GPU machine's, imports the staged tree.
    if [[ -n ${GPU_RUN_SIM_PYTHON:-} && -d .gpu-site/tensorflow && ! -f $work/../staged-import-ok ]]; then
      PYTHONPATH=$repo/.gpu-site "$GPU_RUN_SIM_PYTHON" -c 'import tensorflow as tf, keras; print("ok      staged tree imports: tensorflow", tf.__version__, "keras", keras.__version__, tf.sysconfig.get_build_info()["cuda_compute_capabilities"])' 2>/dev/null ||
        { echo "FAILED  $tier: the staged tree (.gpu-site) does not import with $GPU_RUN_SIM_PYTHON"; failed tf-import; return 1; }
      touch "$work/../staged-import-ok"
    fi
    return 0
  fi
  # shellcheck source=/dev/null
  [[ -f $TF_ENV ]] && . "$TF_ENV"
  export PYTHONPATH=$repo_path${PYTHONPATH:+:$PYTHONPATH}
  "$python" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("tensorflow") is None)' ||
    { echo "gpu_run: no TensorFlow for $python: run .gpu-stage/install.sh first (python -m benchmarks.gpu_calls), or set TF_ENV"; failed tf-env; return 1; }
}

# ---------------------------------------------------------------------------------------------------
# The tiers.

# What decides which CUDA libraries load (TensorFlow's CUDA 12.5 wheels or the machine's): a cuDNN 9 built for
# CUDA 13 has the same soname, libcudnn.so.9, and TensorFlow's RUNPATH lets LD_LIBRARY_PATH win. Into the log
# and the jsonl, before anything else.
library_environment() {
  local file=$work/library-env.txt
  {
    echo "\$ env | grep -E '^(LD_LIBRARY_PATH|CUDA_|XLA_|TF_)'"
    env | grep -E '^(LD_LIBRARY_PATH|CUDA_|XLA_|TF_)' | sort
    echo "\$ ldconfig -p | grep -E 'libcudnn.so.9|libcublas'"
    timeout 15 ldconfig -p 2>&1 | grep -E 'libcudnn.so.9|libcublas' || echo "(none)"
    echo "\$ xz --version | head -1"
    xz --version 2>&1 | head -n 1 || echo "(no xz: install.sh unpacks with Python's lzma, slower)"
  } >"$file" 2>&1
  cat "$file"
  attach library-env "$file"
}

tier_tier0() {
  local toolkits nvcc reason
  ((list)) || library_environment
  step nvidia-smi 15 nvidia-smi --query-gpu=index,name,uuid,driver_version,compute_cap,memory.total,memory.used,clocks.max.sm,power.limit \
    --format=csv -f "$work/nvidia-smi.csv"
  ((dry || list)) || { cat "$work/nvidia-smi.csv"; attach nvidia-smi "$work/nvidia-smi.csv"; timeout 15 nvidia-smi | sed -n '1,12p'; }

  step gpu-check 30 env EXPECTED_GPU_COUNT="$gpus" GPU_CHECK_TIMEOUT_SECONDS=20 "$python" -m trainer.gpu_check "$work/gpu-check.json"
  local rc=$?
  ((dry || list)) || { attach gpu-check "$work/gpu-check.json"; expect gpu-check-passes "$((rc == 0))" "EXPECTED_GPU_COUNT=$gpus, exit $rc"; }

  may_fail=1 step gpu-check-one-too-many 30 env EXPECTED_GPU_COUNT="$((gpus + 1))" GPU_CHECK_TIMEOUT_SECONDS=20 "$python" -m trainer.gpu_check "$work/gpu-check-too-many.json"
  rc=$?
  if ! ((dry || list)); then
    attach gpu-check-one-too-many "$work/gpu-check-too-many.json"
    expect gpu-check-one-too-many-fails "$((rc != 0 && rc != 124 && rc != 137))" "EXPECTED_GPU_COUNT=$((gpus + 1)), exit $rc"
  fi

  # The boot's own script: it picks the newest toolkit the driver runs (CUDA_TOOLKITS: where nvcc is here too),
  # builds gpu_compute_check.cu for the GPU's compute capability and runs it on every GPU; then dcgmi, which
  # this machine may lack: "dcgm-missing" after the computation passed is this step's expected end.
  nvcc=$(command -v nvcc || true)
  toolkits="/usr/local/cuda-* /usr/local/cuda${nvcc:+ $(dirname "$(dirname "$nvcc")")}"
  # pip's CUDA wheels (the boot's own default looks there too): nvcc in nvidia/cu13/bin or nvidia/cuda_nvcc/bin.
  toolkits+=" $("$python" -c 'import nvidia; print(" ".join(p + s for p in nvidia.__path__ for s in ("/cu13", "/cuda_nvcc")))' 2>/dev/null)"
  may_fail=1 step node-health-check 75 env EXPECTED_GPU_COUNT="$gpus" NODE_NAME=gpu-run HEALTH_REPORT="$work/node-health.env" \
    CUDA_TOOLKITS="$toolkits" DIAG_TIMEOUT_SECONDS=60 bash stacks/components/node_boot/health_check.sh
  if ! ((dry || list)); then
    attach node-health-check "$work/node-health.env"
    reason=$(sed -n 's/^REASON=//p' "$work/node-health.env" 2>/dev/null)
    expect node-cuda-check-runs "$(grep -qE '^HEALTH=SUCCESS$|^REASON=dcgm-missing' "$work/node-health.env" 2>/dev/null && echo 1 || echo 0)" \
      "${reason:-healthy}; $(grep -E '^(CUDA_TOOLKIT|COMPUTE_CAPABILITY)=' "$work/node-health.env" 2>/dev/null | tr '\n' ' ')"
  fi

  # torchvision ResNet-50 (AMP, channels-last, eager): the peer figure; the NVML monitor samples meanwhile.
  step torch-resnet-eager 150 "${torch_env[@]}" "$python" -m benchmarks.gpu_steps nvml-load --jsonl "$jsonl" -- \
    "$python" -m benchmarks.torch_resnet --batch "$batch" --steps 60 --warmup 15 --no-compile "$work/torch-eager.json"
  ((dry || list)) || attach torch-resnet-eager "$work/torch-eager.json"
}

tier_tf-check() {
  use_tensorflow || return 1
  step tf-check 180 "$python" -m benchmarks.gpu_steps tf-check --gpus "$gpus" --jsonl "$jsonl"
  ((dry || list)) || record "step=jit-cache" "bytes=$(du -sb "$CUDA_CACHE_PATH" 2>/dev/null | cut -f1 || echo 0)"
}

tier_tests() {
  use_tensorflow || return 1
  # Fresh processes (no fork server: it would fork after TensorFlow's import), three modules side by side.
  step pytest 300 env TRAINER_TEST_FORKSERVER=0 EXPECTED_GPU_COUNT="$gpus" "$python" -m pytest -q -rA -p no:cacheprovider \
    -m gpu -n 3 tests/trainer/test_trainer_gpu.py tests/trainer/test_gpu_real_device.py tests/trainer/test_trainer_bottleneck.py
  ((dry || list)) || record "step=pytest-summary" "summary=$(grep -E '(passed|failed|error|skipped).* in [0-9.]+s' "$out/$tier.log" | tail -n 1)"
}

tier_resnet() {
  use_tensorflow || return 1
  step resnet-vs-torch 330 "$python" -m benchmarks.resnet_bench --vs-torch --inputs memory --torch eager \
    --batch "$batch" --steps 60 --warmup 15 --jsonl "$jsonl"
  ((dry || list)) || figures tf-memory torch-eager
}

tier_records() {
  use_tensorflow || return 1
  step resnet-records 270 "$python" -m benchmarks.resnet_bench --vs-torch --inputs records --torch "" \
    --batch "$batch" --steps 60 --warmup 15 --jsonl "$jsonl" --known "$out/resnet.jsonl"
  ((dry || list)) || figures tf-records
}

tier_jit() {
  use_tensorflow || return 1
  ((dry || list)) || rm -rf "$CUDA_CACHE_PATH"
  local pass
  for pass in cold warm; do
    step "first-step-$pass" 200 "$python" -m benchmarks.gpu_precision --gpus "$gpus" --precisions bf16 --examples 8192 \
      --epochs 2 --label "$pass" --out "$work/$pass.json"
    ((dry || list)) || { attach "first-step-$pass" "$work/$pass.json"; record "step=jit-cache-after-$pass" "bytes=$(du -sb "$CUDA_CACHE_PATH" 2>/dev/null | cut -f1)"; }
  done
}

tier_fp16-split() {
  use_tensorflow || return 1
  step fp16-split 180 "$python" -m benchmarks.gpu_steps fp16-split --jsonl "$jsonl"
}

tier_serve() {
  use_tensorflow || return 1
  step serve 240 "$python" -m benchmarks.serve_bench --seconds 2 --repeats 1 --jsonl "$jsonl"
}

tier_torch-compile() {
  step torch-resnet-compile 300 "${torch_env[@]}" "$python" -m benchmarks.torch_resnet --batch "$batch" --steps 60 --warmup 15 \
    "$work/torch-compile.json"
  ((dry || list)) || attach torch-resnet-compile "$work/torch-compile.json"
}

status=0
rm -f "${TMPDIR:-/tmp}/gpu-run-work/staged-import-ok"
for tier in "${requested[@]}"; do
  jsonl=$out/$tier.jsonl
  work=${TMPDIR:-/tmp}/gpu-run-work/$tier
  if ((list)); then echo "$tier"; "tier_$tier"; continue; fi
  rm -rf "$work" && mkdir -p "$work"
  : >"$jsonl"
  echo "=== $tier$( ((dry)) && echo ' (dry run)') $(date -u +%Y-%m-%dT%H:%M:%SZ), $gpus GPU(s)" | tee "$out/$tier.log"
  started=$(now_ms)
  "tier_$tier" 2>&1 | tee -a "$out/$tier.log"  # the tier's output in its log as it is printed
  failures=$(sort -u "$work/failed" 2>/dev/null | tr '\n' ' ')
  record "step=tier-total" "seconds=$((($(now_ms) - started) / 1000))" "failed=${failures% }"
  [[ -z $failures ]] || { status=1; echo "=== $tier: FAILED: $failures" | tee -a "$out/$tier.log"; }
done
exit $status
