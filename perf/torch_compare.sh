#!/bin/sh
# issue 3, part 8: all_reduce, all_gather_into_tensor and reduce_scatter_tensor through
# torch.distributed, on accl's torch backend ("torch-accl") and on gloo, with accl's own C API
# beside them, in one run: 2 local ranks, float32, 8 B to 64 MiB, medians of 3 interleaved
# passes; ratios are torch-accl's busbw over each peer's. Extra arguments go to accl-perf
# (e.g. -J torch.json, or --passes 5).
set -e
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
PYTHONPATH=python exec "$PY" -m accl.perf all_reduce all_gather reduce_scatter -np 2 \
    -b 8 -e 64M -f 4 -d float32 --library torch-accl --compare gloo,accl --passes 3 "$@"
