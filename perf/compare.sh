#!/bin/sh
# The comparison in docs/performance.md: accl, torch.distributed gloo, Open MPI and MPICH (mpi4py)
# and Intel oneCCL on 2 local ranks, float32, 8 B to 64 MiB, each point the median of 5 loops of
# 20 calls or more, each loop at least 2 ms (--loop-us), medians of 5 interleaved passes, each
# peer's launch pairing it with accl (--paired: the two libraries' loops in turn at every
# point); the table goes to stdout, the plot to
# docs/performance.png. Extra arguments are passed on (e.g. -J perf.json).
# Run from a built tree (make build; make oneccl builds oneCCL's shim); with the wheel installed,
# `accl-perf` replaces the python line.
set -e
cd "$(dirname "$0")/.."
PYTHONPATH=python exec .venv/bin/python -m accl.perf \
    all_reduce all_gather reduce_scatter broadcast -np 2 -b 8 -e 64M -f 2 -d float32 \
    --repeat 5 --loop-us 2000 --compare gloo,mpi,mpich,oneccl --paired --passes 5 \
    --plot docs/performance.png "$@"
