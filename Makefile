# tf-fbn-ops. On a fresh machine with Python 3 and g++, two commands do all the set-up:
#   make demo   the virtual environment, TensorFlow and the library, then a parity table
#   make test   the same set-up, then every test CI runs
# `make help` lists every target, one line each; below they are grouped by concern.

PYTHON     ?= python3
VENV       ?= .venv
TF_PACKAGE ?= tensorflow-cpu==2.21.0
# Keras 2, for the tests of Keras' fused BatchNormalization (Keras 3 has no fused path). Without
# its dependencies: it asks for the `tensorflow` package, which TF_PACKAGE already provides.
TF_KERAS_PACKAGE ?= tf_keras==2.21.0
# JAX (CPU), for the test of the FFI handlers as a library of their own in JAX's XLA; it runs in
# processes of its own, never beside TensorFlow.
JAX_PACKAGE ?= jax==0.8.1
# auditwheel, which the wheels are checked with; the tests check how a cross build calls it.
AUDITWHEEL_PACKAGE ?= auditwheel==6.8.2
# Benchmark-only dependencies (make bench): PyTorch is one of the compared implementations,
# matplotlib draws results.png.
BENCH_PACKAGES ?= torch==2.13.0 matplotlib
BENCH_ARGS ?=
# Options of build/core_bench (make core-bench), e.g. CORE_BENCH_ARGS="--loops".
CORE_BENCH_ARGS ?=
# make cores-interleaved: the commit to time this checkout's core against, and the options.
OLD ?=
CORES_ARGS ?=
# pytest worker processes for `make test` (pytest-xdist): the suite is mostly single-threaded
# Python and fresh interpreters, so two workers halve its time on two cores. Each worker imports
# TensorFlow (about 1 GB): raise it only with the memory to match.
PYTEST_WORKERS ?= 2
# Steps `make test` runs at once: most are one compiler or one test program, so one per core.
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CXX        ?= g++
# nvcc: from CUDA_HOME, else PATH (as setup.py finds it); empty means no CUDA here.
NVCC       ?= $(shell if [ -x "$$CUDA_HOME/bin/nvcc" ]; then echo "$$CUDA_HOME/bin/nvcc"; \
                  else command -v nvcc; fi)
# Each part's folders and sources, and the flags every build shares: written once in
# build_support/build_description.py (make build-description rewrites this file from it).
include build_support/generated/build.mk
# The tests keep their assertions: no -DNDEBUG.
NVCC_FLAGS := $(NVCC_LANGUAGE_FLAGS) -O3 -I. $(GENCODE_FLAGS)

# The core's own programs (tests, benchmarks): the library's language and FP-contraction flags.
CORE_FLAGS := $(LANGUAGE_FLAGS) $(EXACT_FLAGS) -I. -pthread

PY      := $(VENV)/bin/python
# The stamp's name changes with the package list, so that existing environments get the new one.
DEPS    := $(VENV)/.deps-installed-4
BENCH_DEPS := $(VENV)/.bench-deps-installed
LIBRARY := tf_fbn_ops/_fbn_ops.so
CC_FILES := $(shell find cc -name '*.cc' -o -name '*.cu' -o -name '*.cuh' -o -name '*.h')
GPU_TEST  := build/gpu_core_test
GPU_BENCH := build/gpu_bench
GPU_EMU_TEST := build/gpu_emu_test
GPU_BENCH_EMU := build/gpu_bench_emu
GRAPH_API_TEST := build/graph_api_test
GRAPH_API_FORWARD_TEST := build/graph_api_forward_test
GRAPH_API_EXAMPLE := build/graph_api_example

.PHONY: demo test lib core-test core-bench gpu-test gpu-code-check gpu-sass-report gpu-test-large gpu-bench gpu-emu-test \
        graph-api-test \
        sanitize sanitize-ops fuzz fuzz-xla test-large \
        tf-matrix bazel-test bench wheel wheel-smoke wheels gpu-peers gpu-peers-emu xla-ffi-lib \
        tf-cuda-bundle platform-test sdist arm64-core-test wheel-aarch64 bench-sync bench-sync-xla \
        xla-ffi-test help clean build-description

### Everyday

## the virtual environment, TensorFlow and the library, then a parity table against TensorFlow
demo: lib
	$(PY) -m tf_fbn_ops demo

# The steps run TEST_JOBS at a time, each one's output printed whole when it ends; then pytest,
# whose workers take the cores. Make starts jobs in this order as their inputs are ready: the
# longest single-threaded programs (the emulated CUDA test, the sanitized core tests: minutes
# each) first, so that none of them runs alone at the end with a core idle.
TEST_STEPS := gpu-emu-test sanitize lib core-test $(if $(NVCC),gpu-test gpu-code-check) \
              graph-api-test xla-ffi-lib xla-ffi-test
## every test CI runs: C++ core (CUDA emulated, and on a GPU), graph API, FFI, sanitizers, pytest
test:
	$(MAKE) -j$(TEST_JOBS) --output-sync=target $(TEST_STEPS)
	$(PY) -m pytest -q -rs -n $(PYTEST_WORKERS) tests

## the op library, built in place (an editable install into the venv)
lib: $(LIBRARY)

# An editable install: the library is built in place and the package imports from the checkout.
$(LIBRARY): $(DEPS) $(CC_FILES) setup.py
	$(PY) -m pip install --quiet --no-build-isolation --no-deps -e .
	touch $@

$(DEPS):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip "setuptools>=77" wheel
	$(PY) -m pip install --quiet "$(TF_PACKAGE)" pytest pytest-xdist hypothesis "$(AUDITWHEEL_PACKAGE)"
	$(PY) -m pip install --quiet --no-deps "$(TF_KERAS_PACKAGE)"
	$(PY) -m pip install --quiet "$(JAX_PACKAGE)"
	touch $@

# A `## ` line right above a target's rule is its line in this list; `### ` lines head groups.
## every target, one line each
help:
	@awk '/^### / { printf "\n%s\n", substr($$0, 5); next } \
	      /^## / { text = substr($$0, 4); next } \
	      text != "" && /^[a-z0-9-]+:/ { name = $$0; sub(/:.*/, "", name); \
	                                     printf "  %-18s %s\n", name, text } \
	      { text = "" }' $(firstword $(MAKEFILE_LIST))

# A platform root's /proc stays mounted if its run was killed: unmounted before deleting.
## remove build outputs (build/, dist/, the library)
clean:
	-for root in build/platform/*/; do umount -q "$${root}proc" 2>/dev/null; done; true
	rm -rf build dist *.egg-info $(LIBRARY) tf_fbn_ops/_build_info.py

## rewrite build_support/generated/ (Make's and Bazel's view) from build_description.py
build-description:
	$(PYTHON) -m build_support.build_description

### Objects the test programs share

# Each source is compiled once for the programs that link it, per flag set: the core as the
# library compiles it (core-test, core-bench, the FFI library), and under ASan+UBSan (sanitize,
# the FFI handlers' tests, the emulated CUDA tests; the CUDA sources as C++ on the host
# emulator). CC_FILES as a prerequisite: any header may be included.
OBJ := build/obj
RELEASE_CORE_OBJECTS := $(patsubst %.cc,$(OBJ)/release/%.o,$(CORE_SOURCES))
ASAN_CORE_OBJECTS := $(patsubst %.cc,$(OBJ)/asan/%.o,$(CORE_SOURCES))
ASAN_REFERENCE_OBJECTS := $(OBJ)/asan/cc/core/bn_grad_reference.o \
                          $(OBJ)/asan/cc/core/bn_forward_reference.o
ASAN_CUDA_EMU_OBJECTS := $(patsubst %.cu,$(OBJ)/asan/%.o,$(CORE_CUDA_SOURCES)) \
                         $(OBJ)/asan/cc/tests/gpu_emulator/emulator.o
ASAN_FLAGS := $(CORE_FLAGS) $(SANITIZE_FLAGS) -Wall -Wextra -Wno-unknown-pragmas \
              -Icc/tests/gpu_emulator

# The library's flags, for the FFI library's handlers.
RELEASE_OBJECT_FLAGS := $(CORE_FLAGS) $(RELEASE_FLAGS) -fPIC -Wall -Wextra

# The core's objects are the library's own, release and sanitized: compiled where setup.py keeps
# them (build_support/library_objects.py) and copied here, so the library's builds (`make lib`,
# sanitize-ops, `make wheel`) find them made.
$(OBJ)/release/cc/core/%.o: cc/core/%.cc $(CC_FILES)
	CXX="$(CXX)" $(PYTHON) -m build_support.library_objects release $< $@

$(OBJ)/asan/cc/core/%.o: cc/core/%.cc $(CC_FILES)
	CXX="$(CXX)" $(PYTHON) -m build_support.library_objects sanitize $< $@

$(LIBRARY): $(RELEASE_CORE_OBJECTS)

$(OBJ)/release/%.o: %.cc $(CC_FILES)
	mkdir -p $(dir $@)
	$(CXX) $(RELEASE_OBJECT_FLAGS) -c $< -o $@

$(OBJ)/asan/%.o: %.cc $(CC_FILES)
	mkdir -p $(dir $@)
	$(CXX) $(ASAN_FLAGS) -c $< -o $@

$(OBJ)/asan/%.o: %.cu $(CC_FILES)
	mkdir -p $(dir $@)
	$(CXX) $(ASAN_FLAGS) -x c++ -c $< -o $@

# The CUDA core for the CUDA test (nvcc): each object with ptxas's report (<name>.ptxas.txt)
# and the PTX nvcc made (<name>.keep/) beside it, which gpu-code-check reads, so the kernels it
# checks are the ones tested, compiled once. ptxas's lines are kept out of the build's output.
CUDA_TEST_OBJECTS := $(patsubst %.cu,$(OBJ)/cuda/%.o,$(CORE_CUDA_SOURCES))

$(OBJ)/cuda/%.o: %.cu $(CC_FILES)
	@test -n "$(NVCC)" || { echo "no nvcc: set CUDA_HOME or put nvcc on PATH"; exit 1; }
	rm -rf $(@:.o=.keep) && mkdir -p $(@:.o=.keep)
	$(NVCC) $(NVCC_FLAGS) -Xptxas -v --keep --keep-dir $(@:.o=.keep) -c $< -o $@ \
	    2> $(@:.o=.ptxas.txt) || { cat $(@:.o=.ptxas.txt) >&2; rm -f $@; exit 1; }
	@grep -v '^ptxas info' $(@:.o=.ptxas.txt) >&2 || true

# The FFI handlers and the fake of XLA's runtime read XLA's FFI headers, copied from
# TensorFlow's (see xla-ffi-lib).
XLA_FFI_INCLUDE ?= build/xla_ffi_include
XLA_FFI_HEADER  := $(XLA_FFI_INCLUDE)/xla/ffi/api/ffi.h

$(OBJ)/release/cc/xla_ffi/%.o: cc/xla_ffi/%.cc $(CC_FILES) $(XLA_FFI_HEADER)
	mkdir -p $(dir $@)
	$(CXX) $(RELEASE_OBJECT_FLAGS) -I$(XLA_FFI_INCLUDE) -c $< -o $@

$(OBJ)/asan/cc/xla_ffi/%.o: cc/xla_ffi/%.cc $(CC_FILES) $(XLA_FFI_HEADER)
	mkdir -p $(dir $@)
	$(CXX) $(ASAN_FLAGS) -I$(XLA_FFI_INCLUDE) -c $< -o $@

$(OBJ)/asan/cc/tests/xla_ffi_fake_api.o: cc/tests/xla_ffi_fake_api.cc $(CC_FILES) $(XLA_FFI_HEADER)
	mkdir -p $(dir $@)
	$(CXX) $(ASAN_FLAGS) -I$(XLA_FFI_INCLUDE) -c $< -o $@

### The CPU core (no TensorFlow)

CORE_TESTS := core_test core_stages_test core_forward_test
## the CPU core's tests (plain g++, no TensorFlow)
core-test: $(addprefix run-,$(CORE_TESTS))

# The core needs no TensorFlow: plain g++. core_test: the gradient against its reference, its
# bits across threads and instruction sets; core_stages_test: synchronized batch norm's two
# stages against one call and the reference; core_forward_test: the forward, as core_test.
$(addprefix build/,$(CORE_TESTS)): build/%: cc/tests/%.cc $(RELEASE_CORE_OBJECTS) $(CC_FILES)
	mkdir -p $(dir $@)
	$(CXX) $(CORE_FLAGS) -O2 -Wall -Wextra $(RELEASE_CORE_OBJECTS) $< -o $@

# The CPU core alone (no TensorFlow) against the harness's streaming kernel, 1 and 2 threads
# (options in CORE_BENCH_ARGS, listed in benchmarks/core_bench/core_bench.cc; --loops times
# each inner loop by cache level); not a test. The streaming loops are compiled as the harness
# compiles them (-march=native), the core as the library does.
## the CPU core alone against a streaming kernel, 1 and 2 threads (CORE_BENCH_ARGS=--loops)
core-bench: $(RELEASE_CORE_OBJECTS) $(CC_FILES) $(wildcard benchmarks/core_bench/*)
	mkdir -p build
	$(CXX) -O3 -march=native -fopenmp-simd -c benchmarks/core_bench/stream_loops.cc \
	    -o build/core_bench_stream_loops.o
	$(CXX) $(CORE_FLAGS) $(RELEASE_FLAGS) $(RELEASE_CORE_OBJECTS) \
	    benchmarks/core_bench/core_bench.cc build/core_bench_stream_loops.o -o build/core_bench
	./build/core_bench $(CORE_BENCH_ARGS)

# Two commits' cores timed in one process, calls alternated round by round (options and cases
# in CORES_ARGS, listed in benchmarks/core_bench/cores_interleaved.cc): how a speed change is
# bisected on a shared host. OLD's cc/core is built with its namespace renamed (-Dfbn=fbn_old)
# and its own headers first, beside this checkout's release objects; not a test.
OLD_CORE := build/cores_interleaved_old
.PHONY: cores-interleaved
## two commits' CPU cores in one process (OLD=<commit> CORES_ARGS="--threads 1 16x7x7x2048:T")
cores-interleaved: $(RELEASE_CORE_OBJECTS) $(CC_FILES) $(wildcard benchmarks/core_bench/*)
	@test -n "$(OLD)" || { echo "usage: make cores-interleaved OLD=<commit> CORES_ARGS=..."; exit 2; }
	rm -rf $(OLD_CORE) && mkdir -p $(OLD_CORE)/tree $(OLD_CORE)/obj
	git archive $(OLD) cc/core | tar -x -C $(OLD_CORE)/tree
	for f in $(OLD_CORE)/tree/cc/core/*.cc $(OLD_CORE)/tree/cc/core/cpu/*.cc \
	    benchmarks/core_bench/core_call.cc; do \
	  $(CXX) -I$(OLD_CORE)/tree $(CORE_FLAGS) $(RELEASE_FLAGS) -Dfbn=fbn_old \
	      -DCORE_CALL=OldCoreCall -c $$f -o $(OLD_CORE)/obj/$$(basename $$f .cc).o || exit 1; \
	done
	$(CXX) $(CORE_FLAGS) $(RELEASE_FLAGS) -DCORE_CALL=NewCoreCall \
	    benchmarks/core_bench/core_call.cc -c -o build/new_core_call.o
	$(CXX) $(CORE_FLAGS) $(RELEASE_FLAGS) benchmarks/core_bench/cores_interleaved.cc \
	    $(OLD_CORE)/obj/*.o build/new_core_call.o $(RELEASE_CORE_OBJECTS) \
	    -o build/cores_interleaved
	./build/cores_interleaved $(CORES_ARGS)

# The CPU core built for Linux AArch64 (Debian's cross compiler) and run under qemu: its test,
# and its outputs against this machine's, bit for bit (installs both tools with apt if missing).
## the CPU core cross-built for AArch64: its test and its bits under qemu
arm64-core-test:
	tools/arm64_core_check.sh

### The CUDA core (no TensorFlow)

$(GPU_TEST): $(CUDA_TEST_OBJECTS) $(CC_FILES)
	mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) cc/core/bn_grad_reference.cc cc/core/bn_forward_reference.cc \
	    $(CUDA_TEST_OBJECTS) cc/tests/gpu_core_test.cu -o $@

## the CUDA core's test (nvcc; SKIP without a GPU, a failure with FBN_REQUIRE_GPU=1)
gpu-test: $(GPU_TEST)
	./$(GPU_TEST)

## the CUDA kernels as compiled for every GPU_ARCHS: no spills, vector loads and stores (nvcc)
gpu-code-check: $(CUDA_TEST_OBJECTS)
	python3 tools/gpu_code_check.py "$(GPU_ARCHS)" $(CUDA_TEST_OBJECTS)

## the CUDA kernels' machine code for one architecture (SASS_ARCH, default 90): global loads
## and stores per kernel (nvcc; NVIDIA's cuobjdump and nvdisasm, from PyPI if not on PATH)
SASS_ARCH ?= 90
gpu-sass-report: $(DEPS)
	@test -n "$(NVCC)" || { echo "no nvcc: set CUDA_HOME or put nvcc on PATH"; exit 1; }
	$(PY) tools/gpu_sass_report.py "$(NVCC)" "$(SASS_ARCH)" $(CORE_CUDA_SOURCES)

## gpu-test with float16 tensors of more than 2^31 elements (~13 GB of GPU memory)
gpu-test-large: $(GPU_TEST)
	FBN_GPU_TEST_LARGE=1 ./$(GPU_TEST)

# The CUDA kernels' own source (no copy) and the GPU test, compiled as C++ against the host
# emulator in cc/tests/gpu_emulator (threads as fibers, checked barriers and launch limits,
# NaN-filled memory), under AddressSanitizer and UndefinedBehaviorSanitizer; then the same
# program on emulated machines without a GPU or with an old driver (skip, or fail).
$(GPU_EMU_TEST): $(ASAN_CUDA_EMU_OBJECTS) $(ASAN_REFERENCE_OBJECTS) $(CC_FILES)
	mkdir -p $(dir $@)
	$(CXX) $(ASAN_FLAGS) -x c++ cc/tests/gpu_core_test.cu -x none $(ASAN_CUDA_EMU_OBJECTS) \
	    $(ASAN_REFERENCE_OBJECTS) -o $@

# The GPU benchmark on the emulator: its calls and buffers checked by ASan on a small shape, so
# that a GPU session's run does not fail on them (its times mean nothing here).
$(GPU_BENCH_EMU): $(ASAN_CUDA_EMU_OBJECTS) $(CC_FILES) benchmarks/gpu_bench.cu
	mkdir -p $(dir $@)
	$(CXX) $(ASAN_FLAGS) -x c++ benchmarks/gpu_bench.cu -x none $(ASAN_CUDA_EMU_OBJECTS) -o $@

## the CUDA core's test and its benchmark's calls on the host emulator, ASan+UBSan (no GPU/nvcc)
gpu-emu-test: run-gpu_emu_test $(GPU_BENCH_EMU)
	cc/tests/gpu_presence_test.sh ./$(GPU_EMU_TEST)
	ASAN_OPTIONS=abort_on_error=1 FBN_BENCH_SHAPES=1x8x8x32 ./$(GPU_BENCH_EMU)

$(GPU_BENCH): $(CC_FILES) benchmarks/gpu_bench.cu
	@test -n "$(NVCC)" || { echo "no nvcc: set CUDA_HOME or put nvcc on PATH"; exit 1; }
	mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) $(CORE_CUDA_SOURCES) benchmarks/gpu_bench.cu -o $@

## the CUDA core's gradient and forward timed against a device copy (nvcc and a GPU)
gpu-bench: $(GPU_BENCH)
	./$(GPU_BENCH)

# The CUDA core next to cuDNN's and PyTorch's batch-norm backward and a copy, on one GPU
# (PyTorch with CUDA, no TensorFlow); gpu-peers-emu runs the same harness's plumbing on the host
# emulator (no GPU, no timing). Options in PEERS_ARGS, e.g. PEERS_ARGS=--shapes=64x56x56x256.
GPU_PEERS_CORE := build/gpu_peers/libfbn_core.so
GPU_PEERS_EMU_CORE := build/gpu_peers/libfbn_core_emu.so
PEERS_ARGS ?=

$(GPU_PEERS_CORE): $(CC_FILES) benchmarks/gpu_peers/core_capi.cu
	@test -n "$(NVCC)" || { echo "no nvcc: set CUDA_HOME or put nvcc on PATH"; exit 1; }
	mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -DNDEBUG -shared $(NVCC_SHARED_FLAGS) \
	    $(CORE_CUDA_SOURCES) benchmarks/gpu_peers/core_capi.cu -o $@

$(GPU_PEERS_EMU_CORE): $(CC_FILES) benchmarks/gpu_peers/core_capi.cu
	mkdir -p $(dir $@)
	$(CXX) $(CORE_FLAGS) -O1 -shared -fPIC -Wno-unknown-pragmas -Icc/tests/gpu_emulator \
	    -x c++ $(CORE_CUDA_SOURCES) benchmarks/gpu_peers/core_capi.cu \
	    -x none cc/tests/gpu_emulator/emulator.cc -o $@

## the CUDA core beside cuDNN, PyTorch and a copy on one GPU (PEERS_ARGS)
gpu-peers: $(GPU_PEERS_CORE)
	$(PYTHON) benchmarks/gpu_peers/peers.py $(PEERS_ARGS)

## gpu-peers' plumbing on the host emulator (no GPU, no timing)
gpu-peers-emu: $(GPU_PEERS_EMU_CORE) $(DEPS)
	$(PY) benchmarks/gpu_peers/peers.py --emulated $(PEERS_ARGS)

# TensorFlow's CUDA build for the GPU machines' CPython (TF_CUDA_BUNDLE_PYTHON), in parts that
# each fit a command's 64 MiB: assembled there by tools/tf_cuda_bundle/assemble.py.
TF_CUDA_BUNDLE_PYTHON ?= 3.12
## TensorFlow's CUDA build in 64 MiB parts for a GPU machine (docs/gpu.md)
tf-cuda-bundle:
	$(PYTHON) tools/tf_cuda_bundle/make_bundle.py build/tf_cuda_bundle \
	    --python $(TF_CUDA_BUNDLE_PYTHON)

### The XLA FFI handlers

# The FFI handlers as a library of their own (no TensorFlow): the core and cc/xla_ffi/, against
# XLA's FFI headers copied from the venv's TensorFlow (2.20 or later) into XLA_FFI_INCLUDE, for
# JAX or any XLA. XLA_FFI_CUDA=1 adds the CUDA core and handler (nvcc; GPU_ARCHS).
XLA_FFI_LIB     := build/libtf_fbn_ops_xla_ffi.so
XLA_FFI_CUDA    ?= 0
XLA_FFI_LIB_OBJECTS := $(RELEASE_CORE_OBJECTS) \
                       $(patsubst %.cc,$(OBJ)/release/%.o,$(XLA_FFI_SOURCES))
# One object per CUDA source: nvcc compiles one file per -c with -o.
XLA_FFI_GPU_OBJECTS := $(patsubst cc/core/gpu/%.cu,build/xla_ffi_gpu/%.o,$(CORE_CUDA_SOURCES))

## the XLA FFI handlers as a library of their own, for JAX or any XLA
xla-ffi-lib: $(XLA_FFI_LIB)

# Copied, not included in place: a GPU machine without TensorFlow gets them with the tree. The
# environment comes first only where they are still to be copied.
$(XLA_FFI_HEADER): $(if $(wildcard $(XLA_FFI_HEADER)),,$(DEPS))
	@test -x $(PY) || { echo "$@ is copied from TensorFlow's headers: make lib first"; exit 1; }
	mkdir -p $(dir $@)
	cp "$$($(PY) -c 'import tensorflow as tf; print(tf.sysconfig.get_include())')"/xla/ffi/api/*.h \
	    $(dir $@)

build/xla_ffi_gpu/%.o: cc/core/gpu/%.cu $(CC_FILES)
	@test -n "$(NVCC)" || { echo "no nvcc: set CUDA_HOME or put nvcc on PATH"; exit 1; }
	mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -DNDEBUG $(NVCC_SHARED_FLAGS) -c $< -o $@

$(XLA_FFI_LIB): $(XLA_FFI_LIB_OBJECTS) $(CC_FILES) \
                $(if $(filter 1,$(XLA_FFI_CUDA)),$(XLA_FFI_GPU_OBJECTS))
	$(CXX) $(CORE_FLAGS) $(RELEASE_FLAGS) -fPIC -shared -I$(XLA_FFI_INCLUDE) \
	    $(XLA_FFI_LIB_OBJECTS) $(if $(filter 1,$(XLA_FFI_CUDA)),$(XLA_FFI_GPU_SOURCES) \
	    $(XLA_FFI_GPU_OBJECTS) -L$(dir $(NVCC))../lib64 -L$(dir $(NVCC))../lib -l:libcudart_static.a \
	    -ldl -lrt) -Wl,--no-undefined -o $@

# The handlers without XLA: each called through call frames built by hand, on a fake of XLA's
# side of the FFI C API (cc/tests/xla_ffi_fake_api.h: errors, thread pool, stream, scratch
# memory), and held to the core's bits; the CUDA one against the host emulator. ASan+UBSan, as
# gpu-emu-test; any report aborts.
XLA_FFI_TEST     := build/xla_ffi_test
XLA_FFI_EMU_TEST := build/xla_ffi_emu_test
XLA_FFI_SYNC_TEST := build/xla_ffi_sync_test
XLA_FFI_FORWARD_TEST := build/xla_ffi_forward_test
XLA_FFI_FORWARD_EMU_TEST := build/xla_ffi_forward_emu_test
XLA_FFI_TEST_FLAGS := $(ASAN_FLAGS) -I$(XLA_FFI_INCLUDE)
# The host handlers with the core, the CUDA handlers with the emulated CUDA core.
XLA_FFI_HOST_OBJECTS := $(ASAN_CORE_OBJECTS) \
                        $(patsubst %.cc,$(OBJ)/asan/%.o,$(XLA_FFI_SOURCES)) \
                        $(OBJ)/asan/cc/tests/xla_ffi_fake_api.o
XLA_FFI_CUDA_OBJECTS := $(ASAN_CUDA_EMU_OBJECTS) \
                        $(patsubst %.cc,$(OBJ)/asan/%.o,$(XLA_FFI_GPU_SOURCES))
# The test's own source first, then the objects among the prerequisites.
XLA_FFI_TEST_LINK = mkdir -p $(dir $@) && $(CXX) $(XLA_FFI_TEST_FLAGS) $< $(filter %.o,$^) -o $@

$(XLA_FFI_TEST): cc/tests/xla_ffi_test.cc $(XLA_FFI_HOST_OBJECTS) $(CC_FILES)
	$(XLA_FFI_TEST_LINK)

# The forward's handlers: CPU, and CUDA (emulated).
$(XLA_FFI_FORWARD_TEST): cc/tests/xla_ffi_forward_test.cc $(XLA_FFI_HOST_OBJECTS) $(CC_FILES)
	$(XLA_FFI_TEST_LINK)

$(XLA_FFI_EMU_TEST): cc/tests/xla_ffi_emu_test.cc $(XLA_FFI_CUDA_OBJECTS) \
                     $(OBJ)/asan/cc/tests/xla_ffi_fake_api.o $(CC_FILES)
	$(XLA_FFI_TEST_LINK)

$(XLA_FFI_FORWARD_EMU_TEST): cc/tests/xla_ffi_forward_emu_test.cc $(XLA_FFI_CUDA_OBJECTS) \
                             $(OBJ)/asan/cc/tests/xla_ffi_fake_api.o $(CC_FILES)
	$(XLA_FFI_TEST_LINK)

# Synchronized batch norm's handlers, CPU and CUDA (emulated) in one program.
$(XLA_FFI_SYNC_TEST): cc/tests/xla_ffi_sync_test.cc $(XLA_FFI_HOST_OBJECTS) \
                      $(XLA_FFI_CUDA_OBJECTS) $(CC_FILES)
	$(XLA_FFI_TEST_LINK)

XLA_FFI_TESTS := $(patsubst build/%,%,$(XLA_FFI_TEST) $(XLA_FFI_FORWARD_TEST) \
                   $(XLA_FFI_FORWARD_EMU_TEST) $(XLA_FFI_EMU_TEST) $(XLA_FFI_SYNC_TEST))
## the FFI handlers on a fake XLA runtime, CPU and emulated CUDA, under ASan+UBSan
xla-ffi-test: $(addprefix run-,$(XLA_FFI_TESTS))

# The same number of cases, each compiled by XLA and held to the kernel's bits (hours: one XLA
# compilation per case).
## fuzz's cases, each compiled by XLA and held to the kernel's bits (hours)
fuzz-xla: lib
	$(PY) tests/fuzz_long.py --xla 100000

# Synchronized batch norm's two backward ops under jit_compile=True: the custom calls of the
# kernels against the HLO lowerings and the kernels without XLA, one process (the CPU).
## synchronized batch norm's backward ops under XLA: custom calls against HLO
bench-sync-xla: lib
	$(PY) benchmarks/sync_bn/xla_paths.py

### The library checked further

# The C++ graph API (tf_fbn_ops/ops.h) against TensorFlow's classes, and the README's example,
# each built with the flags `python -m tf_fbn_ops cc-flags` gives users.
GRAPH_API_BUILD = mkdir -p build && $(CXX) -O0 -Wall -Wno-sign-compare $(QUIET_TF_HEADERS) \
                  $$($(PY) -m tf_fbn_ops cc-flags --cflags) \
                  $< -o $@ $$($(PY) -m tf_fbn_ops cc-flags --libs)

$(GRAPH_API_TEST): cc/tests/graph_api_test.cc cc/tests/graph_api_util.h $(LIBRARY) \
                  tf_fbn_ops/include/tf_fbn_ops/ops.h
	$(GRAPH_API_BUILD)

$(GRAPH_API_FORWARD_TEST): cc/tests/graph_api_forward_test.cc cc/tests/graph_api_util.h \
                          $(LIBRARY) tf_fbn_ops/include/tf_fbn_ops/ops.h
	$(GRAPH_API_BUILD)

$(GRAPH_API_EXAMPLE): examples/graph_api_example.cc $(LIBRARY) tf_fbn_ops/include/tf_fbn_ops/ops.h
	$(GRAPH_API_BUILD)

## the C++ graph API (tf_fbn_ops/ops.h) and the README's example against TensorFlow
graph-api-test: $(GRAPH_API_TEST) $(GRAPH_API_FORWARD_TEST) $(GRAPH_API_EXAMPLE)
	./$(GRAPH_API_TEST)
	./$(GRAPH_API_FORWARD_TEST)
	./$(GRAPH_API_EXAMPLE)

# Sanitizers: any report aborts. Python and TensorFlow are not instrumented, so the runtimes are
# preloaded and leak checking (Python's own "leaks" at exit) is off.
SANITIZE_DIR := build/sanitize
# The tests run from inside the sanitized build, so that its tf_fbn_ops is the one imported
# (Python puts the working directory first); the run checks that before testing.
SANITIZE_ENV := LD_PRELOAD="$$($(CXX) -print-file-name=libasan.so):$$($(CXX) -print-file-name=libubsan.so)" \
                ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
                UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
SANITIZE_TESTS := $(addprefix $(CURDIR)/tests/,test_cve.py test_errors.py test_fuzz.py test_api.py \
                  test_output_memory.py \
                  test_parity.py) -k "not 1000x1000"
# The XLA lowerings' C++ runs when a function is compiled: one compile per op, bad shapes
# included; the forward's cases run its eager kernel beside the compiled one.
SANITIZE_XLA_TESTS := $(CURDIR)/tests/test_xla.py $(CURDIR)/tests/test_forward_xla.py \
                      -k "bad_shapes or traced_outside or (jit_parity and NHWC-train-2x4x5x3) \
                          or bad_inputs or compiled_empty or V3-NCHW-float16"

# The core's test programs under ASan+UBSan (run-sanitize/<program>), then the op library.
SANITIZE_CORE_TESTS := $(addprefix sanitize/,$(CORE_TESTS))
$(addprefix build/,$(SANITIZE_CORE_TESTS)): $(SANITIZE_DIR)/%: cc/tests/%.cc $(ASAN_CORE_OBJECTS) \
                                            $(CC_FILES)
	mkdir -p $(dir $@)
	$(CXX) $(ASAN_FLAGS) $(ASAN_CORE_OBJECTS) $< -o $@

## ASan+UBSan builds of the core tests and the op library, op tests under them
sanitize: $(addprefix run-,$(SANITIZE_CORE_TESTS)) sanitize-ops

sanitize-ops: $(DEPS) $(ASAN_CORE_OBJECTS)
	TF_FBN_OPS_SANITIZE=1 TF_FBN_OPS_CUDA=0 $(PY) setup.py -q build_py --build-lib \
	    $(SANITIZE_DIR)/lib build_ext --build-lib $(SANITIZE_DIR)/lib \
	    --build-temp $(SANITIZE_DIR)/temp
	cd $(SANITIZE_DIR)/lib && $(SANITIZE_ENV) $(CURDIR)/$(PY) -c "import tf_fbn_ops as t; \
	    assert '/build/sanitize/' in t.library_path(), t.library_path(); print(t.library_path())"
	cd $(SANITIZE_DIR)/lib && $(SANITIZE_ENV) $(CURDIR)/$(PY) -m pytest -q -p no:cacheprovider \
	    --rootdir=$(CURDIR) $(SANITIZE_TESTS)
	cd $(SANITIZE_DIR)/lib && $(SANITIZE_ENV) $(CURDIR)/$(PY) -m pytest -q -p no:cacheprovider \
	    --rootdir=$(CURDIR) $(SANITIZE_XLA_TESTS)

# A test program's run, as a target of its own (run-<program under build/>), so that `make -j`
# runs the programs of a step side by side. Any sanitizer report aborts.
TEST_RUNS := $(addprefix run-,$(CORE_TESTS) $(XLA_FFI_TESTS) $(SANITIZE_CORE_TESTS) gpu_emu_test)
.PHONY: $(TEST_RUNS)
$(TEST_RUNS): run-%: build/%
	ASAN_OPTIONS=abort_on_error=1 ./$<

## a 100,000-case differential fuzz run against the float64 oracle
fuzz: lib
	$(PY) tests/fuzz_long.py 100000

## a float16 tensor of more than 2^31 elements
test-large: lib
	$(PY) -m pytest -q -rs tests/large_tensor_check.py

## build and smoke-test against every TensorFlow 2.12-2.21
tf-matrix:
	$(PYTHON) tools/tf_matrix.py

# Bazel (Debian's bazel-bootstrap 4.2.3, offline): the core test and the parity smoke test
# through the Bazel-built library, CPU and (where nvcc exists) CUDA variants.
BAZEL       ?= bazel
SUDO        := $(if $(filter 0,$(shell id -u)),,sudo)
BAZEL_FLAGS := --repo_env=PYTHON_BIN_PATH=$(abspath $(PY)) \
               --test_env=PATH=$(abspath $(VENV))/bin:/usr/bin:/bin
BAZEL_TESTS := //:core_test //:core_stages_test //:core_forward_test //:parity_smoke_test

## the Bazel build: core tests and the parity smoke test, CPU (and CUDA with nvcc)
bazel-test: $(DEPS)
	command -v $(BAZEL) >/dev/null || $(SUDO) apt-get install -y -q bazel-bootstrap || \
	    { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q bazel-bootstrap; }
	$(BAZEL) test $(BAZEL_FLAGS) $(BAZEL_TESTS)
	$(if $(NVCC),$(BAZEL) test $(BAZEL_FLAGS) --repo_env=TF_NEED_CUDA=1 $(BAZEL_TESTS))
	$(BAZEL) shutdown

### Packages

# Binary wheels: the library with its CPU, CUDA and XLA code, tagged by auditwheel for the glibc
# of TensorFlow's own wheel, TensorFlow pinned through extras (build_support/versioning.py). The
# CUDA code is built with CUDA 12.4 from Debian's packages (driver R525+, TensorFlow's own
# floor); WHEEL_CUDA_TOOLKIT=machine builds it with the machine's toolkit instead.
WHEEL_CUDA_TOOLKIT ?= debian-12.4
## a binary wheel for the venv's TensorFlow in dist/, checked by auditwheel
wheel: $(DEPS)
	$(PY) tools/build_wheel.py --out dist --cuda-toolkit $(WHEEL_CUDA_TOOLKIT)

## that wheel installed in a new environment and used from outside the checkout
wheel-smoke: wheel
	$(PYTHON) tools/wheel_smoke.py $$(ls -t dist/tf_fbn_ops-*_x86_64.whl | head -1) \
	    --tensorflow "$(TF_PACKAGE)" \
	    $(if $(filter debian-12.4,$(WHEEL_CUDA_TOOLKIT)),--cuda 12.4)

## one wheel per TensorFlow 2.12-2.21 in dist/
wheels:
	$(PYTHON) tools/tf_matrix.py --wheels

# The source distribution for the venv's TensorFlow minor (its version's fourth number), for
# platforms without a wheel: pip install --no-build-isolation dist/tf_fbn_ops-*.tar.gz.
## the source distribution for the venv's TensorFlow minor
sdist: $(DEPS)
	$(PY) setup.py -q sdist -d dist

# The Linux AArch64 wheel, cross-compiled here against TensorFlow's own AArch64 wheel, which an
# arm64 Debian root under qemu holds (made on first use in build/platform/arm64; root needed).
## the Linux AArch64 wheel, cross-compiled against TensorFlow's AArch64 wheel
wheel-aarch64: $(DEPS)
	$(PY) tools/build_wheel_aarch64.py --out dist

# The newest wheel in dist/, installed and checked under every CPython it is tagged for that this
# machine has, under TensorFlow's CUDA build, and in a Debian 13 root (debootstrap; root needed).
# PLATFORMS names a subset (pythons cuda-build debian13 arm64 sdist). Downloads TensorFlow per
# environment. arm64 needs the AArch64 wheel (built first when it is among them) and takes the
# longest: everything runs under qemu.
PLATFORMS ?=
## the newest wheel under each CPython, TF's CUDA build, Debian 13, arm64 (PLATFORMS)
platform-test: wheel $(if $(or $(filter arm64,$(PLATFORMS)),$(if $(PLATFORMS),,all)),wheel-aarch64)
	$(PYTHON) tools/platform_test.py $$(ls -t dist/tf_fbn_ops-*_x86_64.whl | head -1) $(PLATFORMS)

### Benchmarks

$(BENCH_DEPS): $(DEPS)
	$(PY) -m pip install --quiet $(BENCH_PACKAGES)
	touch $@

## the harness: ours against TF Eigen, oneDNN, PyTorch and a streaming kernel (BENCH_ARGS)
bench: lib $(BENCH_DEPS)
	PYTHONPATH=benchmarks $(PY) -m harness $(BENCH_ARGS)

# A synchronized training step on 2 workers (MultiWorkerMirroredStrategy on 127.0.0.1, the CPU):
# tf_fbn_ops' synchronized layer against Keras', a small convnet and MobileNetV2; step time and
# collectives per step (benchmarks/sync_bn/; options in SYNC_BENCH_ARGS).
SYNC_BENCH_ARGS ?=
## a synchronized training step on 2 workers, ours against Keras' (SYNC_BENCH_ARGS)
bench-sync: lib
	$(PY) benchmarks/sync_bn/run.py $(SYNC_BENCH_ARGS)
