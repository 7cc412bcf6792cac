#!/usr/bin/env bash
# On this (CPU) machine: download the CUDA 13.0 crt headers' wheel (134 KB) into .dev4/ (ignored),
# for scripts/device/crt_headers.py on the device (cudnn-frontend's Hopper KDA anchor compiles with
# NVRTC against headers the image's pip CUDA tree lacks). Carry .dev4 with any call; env.sh applies it.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .dev4
python3 -m pip download -q --no-deps "nvidia-cuda-crt==13.0.88" -d .dev4
ls .dev4
