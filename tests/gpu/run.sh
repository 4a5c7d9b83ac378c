#!/usr/bin/env bash
# The GPU check (issues 3 and 4): on a machine with an NVIDIA GPU, torch with CUDA and the
# nvidia-nccl wheel, in under 5 minutes: build (the torch backend against that torch), run the
# conformance suite on the nccl backend, time all_reduce through accl against NCCL called
# directly, run the torch backend on cuda tensors, and let device memory choose the backend.
# One summary line per check.
# It uses the Python that has torch (PYTHON, default python3) and installs nothing.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
BUILD=${BUILD:-build-gpu}
status=0
say() { printf '%-5s %s\n' "$1" "$2"; [[ $1 == FAIL ]] && status=1; return 0; }

if cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v "$PY")" \
     -DACCL_OUTPUT_DIR="$PWD/$BUILD/python/accl" >"$BUILD.log" 2>&1 &&
   cmake --build "$BUILD" -j "$(nproc)" >>"$BUILD.log" 2>&1; then
  ln -sf "$PWD"/python/accl/*.py "$PWD"/python/accl/py.typed "$BUILD/python/accl/"
  say PASS "build ($BUILD)"
else
  say FAIL "build: see $BUILD.log"; exit 1
fi
export PYTHONPATH="$PWD/$BUILD/python"

"$PY" -m accl.info 2>&1 | grep -E "^ *(nccl|cpu)" | sed 's/^/      /'
ngpu=$("$PY" -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
ranks=1; ((ngpu >= 2)) && ranks=1,2
if timeout 200 "$PY" -m accl.conformance --backend nccl --device cuda -n "$ranks" >conformance.log 2>&1; then
  say PASS "conformance on nccl, ranks $ranks (conformance.log)"
else
  say FAIL "conformance on nccl, ranks $ranks: see conformance.log"
fi

# Each prints its own PASS/FAIL lines; a failure there (or a crash) fails the check.
timeout 120 "$PY" tests/gpu/bench_allreduce.py || status=1
timeout 120 "$PY" tests/gpu/torch_check.py || status=1
timeout 60 "$PY" tests/gpu/follow_memory.py || status=1
exit $status
