#!/usr/bin/env bash
# The GPU check (issues 3 and 4): on a machine with an NVIDIA GPU, torch with CUDA and the
# nvidia-nccl wheel, in under 5 minutes: build (the torch backend against that torch), run the
# conformance suite on the nccl backend, time all_reduce through accl against NCCL called
# directly, run the torch backend on cuda tensors (DDP and FSDP2 too), let device memory choose
# the backend, and build the wheel with pip against that torch and use it. One summary line per
# check.
# It uses the Python that has torch (PYTHON, default python3) and installs nothing (the wheel
# goes into a temporary directory).
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

# The wheel as pip builds it, against this torch, installed on its own: torch must load the
# backend through the wheel's entry point (no import of accl) and serve cuda tensors with it.
wheels=$(mktemp -d)
if timeout 300 "$PY" -m pip wheel -q --no-build-isolation --no-deps -w "$wheels" . >"$BUILD-wheel.log" 2>&1 &&
   "$PY" -m pip install -q --no-index --no-deps --target "$wheels/site" "$wheels"/accl-*.whl >>"$BUILD-wheel.log" 2>&1 &&
   PYTHONPATH="$wheels/site" MASTER_ADDR=127.0.0.1 MASTER_PORT=29533 timeout 60 "$PY" -c '
import sys, torch, torch.distributed as dist
dist.init_process_group("accl", rank=0, world_size=1)
x = torch.ones(1 << 20, device="cuda")
dist.all_reduce(x)
assert x.sum().item() == 1 << 20, x.sum().item()
import accl
assert accl.__file__.startswith(sys.argv[1]), accl.__file__
dist.destroy_process_group()' "$wheels/site" >>"$BUILD-wheel.log" 2>&1; then
  say PASS "wheel built against torch $("$PY" -c 'import torch; print(torch.__version__)'), installed alone, serves cuda tensors"
else
  say FAIL "wheel: see $BUILD-wheel.log"
fi
rm -rf "$wheels"
exit $status
