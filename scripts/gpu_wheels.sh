#!/usr/bin/env bash
# Download the wheels scripts/gpu_check.sh needs on the GPU machine into .whl/ (ignored by git).
#
# The GPU machine has Python 3.12 with torch, transformers, accelerate, numpy, cloudpickle,
# typing-extensions, pyyaml and tqdm, no network, and none of gymnasium's own packages; rlvr's
# K&K path needs only gymnasium from its requirements there (math-verify and faiss are imported by
# the math and search envs only). Run this once, here, with a network, in the repository root.
set -euo pipefail
cd "$(dirname "$0")/.."
exclude="$(git rev-parse --git-path info/exclude)"
grep -qx '/.whl/' "$exclude" 2>/dev/null || echo /.whl/ >> "$exclude"
for pkg in gymnasium==1.4.0 farama-notifications==0.0.4; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d .whl "$pkg"
done
ls -l .whl
