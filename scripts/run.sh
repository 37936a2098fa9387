#!/usr/bin/env bash
# The main job: set up, build, then train the most advanced step on Fashion-MNIST.
# Extra arguments go to the trainer (e.g. scripts/run.sh --epochs 1).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
exec "$BUILD_DIR/bin/01_single_gpu" --epochs 3 --batch_size 128 --lr 0.05 --momentum 0.9 "$@"
