#!/usr/bin/env bash
# The native trainer on one GPU, checked against a CPU fp32 run: bf16 autocast with fp32 master
# weights, gradient checkpointing, 30 GRPO-SG steps on a micro base warm-started there (see
# scripts/gpu_check.py for every check). About 2-3 minutes on one H200, well inside 8; no network.
#
# Prepare once, here, with a network:   scripts/gpu_wheels.sh    (writes .whl/, git-ignored)
# On the GPU machine, in the repository root (with .whl/ carried along):
#     scripts/gpu_check.sh                 # exits non-zero when a check fails
# Without CUDA, or with GPU_CHECK_DEVICE=cpu, a reduced CPU-only variant runs (fp32, short).
# GPU_CHECK_TIMEOUT (seconds, default 480) bounds the whole check.
set -euo pipefail
cd "$(dirname "$0")/.."
site=""
if compgen -G ".whl/*.whl" > /dev/null; then
    site=/tmp/rlvr-gpu-check-site
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" .whl/*.whl
fi
export PYTHONPATH="$PWD${site:+:$site}${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
export RLVR_HOME="${RLVR_HOME:-/tmp/rlvr-gpu-check-home}"
exec timeout "${GPU_CHECK_TIMEOUT:-480}" python3 scripts/gpu_check.py "$@"
