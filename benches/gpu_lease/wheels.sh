#!/bin/bash
# Run HERE, before a GPU lease (the lease's machine reaches no package index): the wheels its
# Python 3.12 image lacks (it has jax 0.11.2 with CUDA, numpy, scipy, tensorstore, msgpack,
# matplotlib, flax, optax, ...) into .whl/ours (ours) and .whl/rejax (the peer), ignored by git;
# name `.whl` in the lease call's `carry`. Pins as constraints.txt's; mujoco for host SAC.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx "/.whl/" .git/info/exclude || echo "/.whl/" >> .git/info/exclude
rm -rf .whl && mkdir -p .whl/ours .whl/rejax
dl() {
    local dir=$1; shift
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux1_x86_64 -d "$dir" "$@"
}
# only what the image lacks: its own flax, optax, chex and orbax ran ours and rejax on the
# 2026-11-26 lease
COMMON=(gymnasium==1.3.0 farama-notifications==0.0.6)
dl .whl/ours "${COMMON[@]}" gymnax==1.0.1 tensorboardx==2.6.5 mujoco==4.0.0 mujoco-core==4.0.0 \
    mujoco-studio==4.0.0 websockets==15.0.1 glfw==2.11.0 pyopengl==3.1.10
dl .whl/rejax "${COMMON[@]}" rejax==0.1.3 gymnax==0.0.9 distrax==0.1.9 dm-tree==0.1.10 \
    tfp-nightly==0.26.0.dev20261027 gast==0.7.0 decorator==5.3.1
du -sh .whl/ours .whl/rejax
