# icl.cpp — primary build.
#
#   make              build every CPU binary into build/
#   make test         build and run all doctest suites (CPU; GPU tests skip without a GPU)
#   make run          the main job (see README)
#   make bench        CPU benchmarks (GEMM GFLOP/s, train step time)
#   make reproduce-cpu every CPU-sized experiment of docs/ and the README into out/reproduce/ (hours)
#   make sanitize     the test suite under AddressSanitizer + UndefinedBehaviorSanitizer
#   make mpi          every binary with MPI (data-parallel training under mpirun; engine/comm.h) — the default
#                     whenever mpicxx is installed (Debian: libopenmpi-dev openmpi-bin); ICL_MPI=0 leaves it out
#   make cuda         every binary (and build-cuda/test_icl) with the CUDA backend, into build-cuda/ (needs nvcc)
#   make test-cuda    make cuda, then run the whole test suite from build-cuda/ (the CUDA tests need a GPU)
#   make deps         install the Debian packages the build needs (as root) or print the command
#   make fuzz         one libFuzzer binary per file reader into build-fuzz/ (needs clang++; tests/fuzz/)
#   make fuzz-run     make fuzz, then each target FUZZ_SECONDS (20) from its seed corpus; a crash fails
#
# Portable build (no -march=native, e.g. for a binary you copy to another machine):
#   make ARCH_FLAGS="-mavx2 -mfma"      or      make ARCH_FLAGS=
SHELL      := /bin/bash
, := ,
.DEFAULT_GOAL := all   # a bare `make` builds every CPU binary (the provenance rule below would otherwise be the first)
CXX        ?= g++
ARCH_FLAGS ?= -march=native
OPT_FLAGS  ?= -O3
CXXFLAGS   ?= $(OPT_FLAGS) $(ARCH_FLAGS)
# -ffp-contract=off: a*b+c rounds as written (an FMA only where the code asks for one), because GCC's choice of
# where to fuse depends on -mtune (Zen tunings avoid FMA chains) and made two native builds of one commit train
# different numbers. With the fixed-order sums of layers/fixed_sum.h, every build — native on Zen or Xeon, the
# portable AVX2 one — trains the same bits (README, "Which numbers depend on the machine"; tools/cross_build_check.sh).
ALL_CXXFLAGS = -std=c++17 -fopenmp -ffp-contract=off -Wall -Wextra -Wno-unused-parameter -Isrc -MMD -MP $(CXXFLAGS)
LDFLAGS    ?=
BASE_LIBS  = $(if $(DEPS_DIR),-L$(abspath $(DEPS_DIR))/lib -Wl$(,)-rpath$(,)$(abspath $(DEPS_DIR))/lib) -fopenmp -lpcre2-8 -lm
LDLIBS     = $(BASE_LIBS)
BUILD      ?= build
NPROC      := $(shell nproc 2>/dev/null || echo 2)
MAKEFLAGS  += -j$(NPROC)

# Debian packages the build needs (DESIGN.md "Dependencies"): the compiler, three header-only libraries and PCRE2
# (GPT-2's pre-tokenization pattern, src/data/gpt2_tokenizer.cpp).
# python3-numpy is optional (the NumPy cross-checks are reported as skipped without it) but installed with them.
DEB_PKGS    = g++ doctest-dev libstb-dev nlohmann-json3-dev libpcre2-dev python3-numpy
DEP_HEADERS = /usr/include/doctest/doctest.h /usr/include/stb/stb_image_write.h /usr/include/nlohmann/json.hpp /usr/include/pcre2.h
DEP_INSTALL = apt-get update && apt-get install -y $(DEB_PKGS)
# DEPS_DIR=DIR: those headers (DIR/include) and PCRE2's library (DIR/lib) carried to a machine that cannot install
# packages — the lent GPU machine (tools/gpu_deps.sh makes the folder, tools/gpu_acceptance.sh --deps passes it).
DEPS_DIR   ?=
ifneq ($(DEPS_DIR),)
DEPS_ABS   := $(abspath $(DEPS_DIR))
ALL_CXXFLAGS += -I$(DEPS_ABS)/include
endif

LIB_SRCS   = $(wildcard src/engine/*.cpp src/layers/*.cpp src/models/*.cpp src/models/*/*.cpp src/data/*.cpp src/report/*.cpp)
BIN_SRCS   = $(wildcard src/*.cpp)
TOOL_SRCS  = $(wildcard tools/*.cpp)
TEST_SRCS  = $(wildcard tests/*.cpp) tests/fuzz/fuzz_targets.cpp

LIB_OBJS   = $(LIB_SRCS:%.cpp=$(BUILD)/%.o)

# The CUDA backend (cuda/*.cu), compiled in only by `make cuda` (which sets ICL_CUDA=1 and BUILD=build-cuda):
# nvcc for the kernels, -DICL_CUDA for the rest (src/layers/dispatch.h then routes Device::cuda to them).
# Architectures: sm_80 (A100) and sm_90 (H100/H200) machine code, plus sm_90 PTX for newer GPUs.
NVCC       ?= $(shell command -v nvcc 2>/dev/null || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; })
CUDA_HOME  ?= $(if $(NVCC),$(patsubst %/bin/nvcc,%,$(NVCC)),/usr/local/cuda)
CUDA_ARCH  ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]
NVCCFLAGS  ?= -O3
CUDA_BUILD ?= build-cuda
CU_SRCS    = $(wildcard cuda/*.cu)
# NCCL (cuda/nccl_comm.cu: several processes on GPUs, engine/comm.h; 2.13 or newer): compiled in whenever nccl.h and
# libnccl are found — in $(NCCL_HOME) if set, the CUDA toolkit, or Debian/Ubuntu's libnccl-dev places; ICL_NCCL=0
# leaves it out (several processes on GPUs are then refused in one line). `make cuda` says which.
NCCL_HOME  ?=
NCCL_INC   := $(firstword $(wildcard $(if $(NCCL_HOME),$(NCCL_HOME)/include/nccl.h) $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h))
NCCL_LIBD  := $(patsubst %/,%,$(dir $(firstword $(wildcard $(if $(NCCL_HOME),$(NCCL_HOME)/lib/libnccl.so $(NCCL_HOME)/lib64/libnccl.so) \
              $(CUDA_HOME)/lib64/libnccl.so /usr/lib/x86_64-linux-gnu/libnccl.so /usr/lib/aarch64-linux-gnu/libnccl.so))))
ICL_NCCL   ?= $(if $(and $(NCCL_INC),$(NCCL_LIBD)),1,0)
NCCL_DEFS  = $(if $(filter 1,$(ICL_NCCL)),-DICL_NCCL $(if $(NCCL_HOME),-I$(NCCL_HOME)/include))
ifeq ($(ICL_CUDA),1)
CU_OBJS    = $(CU_SRCS:%.cu=$(BUILD)/%.o)
ALL_CXXFLAGS += -DICL_CUDA -I. $(NCCL_DEFS)
LDLIBS     += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart $(if $(NCCL_DEFS),-L$(NCCL_LIBD) -Wl$(,)-rpath$(,)$(NCCL_LIBD) -lnccl)
endif
# MPI (src/engine/comm.h): compiled in when OpenMPI's `mpicxx` wrapper is found (its --showme gives the include and
# link flags; the compiler stays $(CXX)), or asked for with ICL_MPI=1 (`make mpi`); ICL_MPI=0 leaves it out. The
# sanitizer and fuzz builds leave it out (OpenMPI's own allocations would read as leaks).
MPICXX     ?= $(shell command -v mpicxx 2>/dev/null)
ICL_MPI    ?= $(if $(MPICXX),1,0)
ifeq ($(ICL_MPI),1)
ifeq ($(MPICXX),)
$(error ICL_MPI=1 (make mpi) needs mpicxx: apt-get install libopenmpi-dev openmpi-bin)
endif
ALL_CXXFLAGS += -DICL_MPI $(shell $(MPICXX) --showme:compile)
LDLIBS     += $(shell $(MPICXX) --showme:link)
endif
# Provenance (src/engine/provenance.h): the commit, whether the tree had uncommitted changes, and the flags are
# compiled into provenance.o; a stamp file changes (and rebuilds that one object) only when one of them does.
GIT_COMMIT := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
GIT_DIRTY  := $(shell git diff --quiet HEAD -- 2>/dev/null && echo 0 || echo 1)
PROV_STAMP := $(BUILD)/provenance.stamp
PROV_TEXT  := $(GIT_COMMIT) $(GIT_DIRTY) $(CXX) $(CXXFLAGS)
$(shell mkdir -p $(BUILD); [ "$$(cat $(PROV_STAMP) 2>/dev/null)" = "$(PROV_TEXT)" ] || echo "$(PROV_TEXT)" > $(PROV_STAMP))
$(BUILD)/src/engine/provenance.o: $(PROV_STAMP)
# Every object depends on the compile command too: building into one folder with other flags rebuilds everything
# (no objects of two flag sets mixed in one binary).
FLAGS_STAMP := $(BUILD)/flags.stamp
FLAGS_TEXT  := $(CXX) $(ALL_CXXFLAGS) $(if $(filter 1,$(ICL_CUDA)),$(NVCC) $(NVCCFLAGS) $(CUDA_ARCH) $(NCCL_DEFS))
$(shell mkdir -p $(BUILD); [ "$$(cat $(FLAGS_STAMP) 2>/dev/null)" = "$(FLAGS_TEXT)" ] || echo "$(FLAGS_TEXT)" > $(FLAGS_STAMP))
$(BUILD)/src/engine/provenance.o: ALL_CXXFLAGS += -DICL_GIT_COMMIT='"$(GIT_COMMIT)"' -DICL_GIT_DIRTY=$(GIT_DIRTY) -DICL_BUILD_FLAGS='"$(CXXFLAGS)"'

BINS       = $(BIN_SRCS:src/%.cpp=$(BUILD)/%)
TOOLS      = $(TOOL_SRCS:tools/%.cpp=$(BUILD)/%)
TEST_OBJS  = $(TEST_SRCS:%.cpp=$(BUILD)/%.o)
TEST_BIN   = $(BUILD)/test_icl

.PHONY: all test run bench reproduce-cpu sanitize deps clean cuda test-cuda fuzz fuzz-run mpi
.SECONDARY:
all: deps $(BINS) $(TOOLS)

# `make deps` (run first by every build target): the compiler and the headers. As root with apt-get, what is
# missing is installed; otherwise one line names what is missing and the one command (to run as root) that
# installs it, and the build stops.
deps:
	@missing=""; command -v $(CXX) >/dev/null 2>&1 || missing="$(CXX)"; \
	for h in $(DEP_HEADERS); do [ -f $$h ] || { [ -n "$(DEPS_DIR)" ] && [ -f "$(DEPS_DIR)/include/$${h#/usr/include/}" ]; } \
	  || missing="$$missing $${h#/usr/include/}"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing the Debian packages the build needs (missing:$$missing): $(DEB_PKGS)"; \
	    (export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq $(DEB_PKGS) >/dev/null) \
	      || { echo "error: apt-get failed; as root, run: $(DEP_INSTALL)"; exit 1; }; \
	    command -v $(CXX) >/dev/null 2>&1 || { echo "error: $(CXX) still not found after installing g++ (set CXX=...)"; exit 1; }; \
	  elif command -v apt-get >/dev/null 2>&1; then \
	    echo "error: missing build dependencies:$$missing; as root, run: $(DEP_INSTALL)"; exit 1; \
	  else \
	    echo "error: missing build dependencies:$$missing (a C++17 compiler with OpenMP, doctest, stb, nlohmann-json, PCRE2; Debian: $(DEB_PKGS))"; exit 1; \
	  fi; \
	fi

# Rebuilt from scratch each time: `ar r` would keep members of renamed or deleted sources, and two sources
# with one basename would replace each other (object basenames must be unique across src/).
$(BUILD)/libicl.a: $(LIB_OBJS) $(CU_OBJS)
	@mkdir -p $(@D)
	@dups=$$(for o in $^; do basename $$o; done | sort | uniq -d); [ -z "$$dups" ] || { echo "error: two sources share an object name: $$dups"; exit 1; }
	rm -f $@ && ar rcs $@ $^

$(BUILD)/cuda/%.o: cuda/%.cu $(FLAGS_STAMP) | deps
	@mkdir -p $(@D)
	$(NVCC) -std=c++17 $(NVCCFLAGS) $(CUDA_ARCH) -Isrc -I. -DICL_CUDA $(NCCL_DEFS) -Xcompiler -Wall,-Wno-unused-parameter -MMD -MP -c $< -o $@

$(BUILD)/%.o: %.cpp $(FLAGS_STAMP) | deps
	@mkdir -p $(@D)
	$(CXX) $(ALL_CXXFLAGS) -c $< -o $@

$(BUILD)/%: $(BUILD)/src/%.o $(BUILD)/libicl.a
	$(CXX) $(LDFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/%: $(BUILD)/tools/%.o $(BUILD)/libicl.a
	$(CXX) $(LDFLAGS) $^ -o $@ $(LDLIBS)

$(TEST_BIN): $(TEST_OBJS) $(BUILD)/libicl.a
	$(CXX) $(LDFLAGS) $^ -o $@ $(LDLIBS)

# The CLI tests find the binaries beside test_icl (or in ICL_BIN_DIR).
# The last line is the plain summary "tests: N passed, N failed, N skipped".
test: all $(TEST_BIN)
	@set -o pipefail; ICL_BIN_DIR=$(BUILD) OMP_NUM_THREADS=2 ./$(TEST_BIN) 2>&1 | tee $(BUILD)/test.log; st=$$?; \
	awk '/^\[doctest\] test cases:/ { print "tests: " $$6 " passed, " $$9 " failed, " $$12 " skipped" }' $(BUILD)/test.log; \
	exit $$st

# The main job: the CPU-sized CGT experiment (ICL-mini: baseline GPT, CGT η=1, CGT aux+reg), ending with the
# Table-1-style comparison and the paths of its plots (train_cgt --preset make-run; docs/cgt.md).
run: all
	OMP_NUM_THREADS=$(NPROC) ./$(BUILD)/train_cgt --preset make-run $(RUN_ARGS)

bench: all
	OMP_NUM_THREADS=$(NPROC) ./$(BUILD)/bench

# Every CPU-sized experiment behind docs/ and the README, each into out/reproduce/<name>/ with its provenance, and
# out/reproduce/index.md (hours; tools/reproduce_cpu.sh --list shows the entries, --only picks some).
reproduce-cpu: all
	bash tools/reproduce_cpu.sh --build $(BUILD) $(REPRODUCE_ARGS)

# The CUDA build. Without nvcc: one line and a non-zero exit.
cuda:
	@if [ -z "$(NVCC)" ]; then echo "error: make cuda needs nvcc (the CUDA Toolkit): none on PATH or in /usr/local/cuda/bin"; exit 1; fi
	@echo "make cuda: $(if $(filter 1,$(ICL_NCCL)),NCCL from $(NCCL_INC) and $(NCCL_LIBD) (several processes on GPUs),no NCCL (several processes on GPUs will be refused; NCCL_HOME=… to point at one))"
	+$(MAKE) ICL_CUDA=1 BUILD=$(CUDA_BUILD) NVCC=$(NVCC) all $(CUDA_BUILD)/test_icl

test-cuda: cuda
	+$(MAKE) ICL_CUDA=1 BUILD=$(CUDA_BUILD) NVCC=$(NVCC) test

mpi:
	+$(MAKE) ICL_MPI=1 all $(TEST_BIN)

sanitize:
	$(MAKE) ICL_MPI=0 BUILD=build-san OPT_FLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" \
	  LDFLAGS="-fsanitize=address,undefined" test

# Fuzzing (tests/fuzz/fuzz_targets.h): the library and the targets built by clang with ASan + UBSan and libFuzzer's
# instrumentation into build-fuzz/, then one build-fuzz/fuzz_<target> per reader. fuzz-run runs each for
# FUZZ_SECONDS from its seed corpus (tests/fuzz/corpus/<target>/ plus what earlier runs found in
# build-fuzz/corpus/); a crash is saved in build-fuzz/crashes/<target>/ and fails the run — copy it into
# tests/fuzz/crashes/<target>/, where `make test` replays it for ever after.
FUZZ_TARGETS = checkpoint npy csv index_json bpe cli gpt2_tokenizer gpt2_encode llmc hf_config
FUZZ_SECONDS ?= 20
FUZZ_FLAGS   = -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
fuzz:
	@command -v clang++ >/dev/null 2>&1 || { echo "error: make fuzz needs clang++ with libFuzzer and libomp (Debian: clang libomp-dev)"; exit 1; }
	+$(MAKE) ICL_MPI=0 CXX=clang++ BUILD=build-fuzz OPT_FLAGS="$(FUZZ_FLAGS)" ARCH_FLAGS= build-fuzz/libicl.a build-fuzz/tests/fuzz/fuzz_targets.o
	@for t in $(FUZZ_TARGETS); do \
	  echo "clang++ … -DICL_FUZZ_TARGET=$$t tests/fuzz/fuzz_main.cpp -o build-fuzz/fuzz_$$t"; \
	  clang++ -std=c++17 -fopenmp -Isrc $(FUZZ_FLAGS) -fsanitize=fuzzer -DICL_FUZZ_TARGET=$$t tests/fuzz/fuzz_main.cpp \
	    build-fuzz/tests/fuzz/fuzz_targets.o build-fuzz/libicl.a -o build-fuzz/fuzz_$$t $(BASE_LIBS) || exit 1; \
	done

fuzz-run: fuzz
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p build-fuzz/corpus/$$t build-fuzz/crashes/$$t; \
	  echo "fuzz_$$t: $(FUZZ_SECONDS) s from tests/fuzz/corpus/$$t"; \
	  UBSAN_OPTIONS=halt_on_error=1 ./build-fuzz/fuzz_$$t build-fuzz/corpus/$$t tests/fuzz/corpus/$$t -max_total_time=$(FUZZ_SECONDS) \
	    -timeout=10 -rss_limit_mb=4096 -max_len=65536 -artifact_prefix=build-fuzz/crashes/$$t/ -print_final_stats=1 >build-fuzz/fuzz_$$t.log 2>&1 \
	    || { tail -40 build-fuzz/fuzz_$$t.log; echo "error: fuzz_$$t found a crash: build-fuzz/crashes/$$t/"; exit 1; }; \
	  grep -E "stat::number_of_executed_units|Done" build-fuzz/fuzz_$$t.log | tr '\n' ' '; echo; \
	done

clean:
	rm -rf build build-san build-cuda build-fuzz

-include $(LIB_OBJS:.o=.d) $(CU_OBJS:.o=.d) $(TEST_OBJS:.o=.d) $(BIN_SRCS:src/%.cpp=$(BUILD)/src/%.d) $(TOOL_SRCS:tools/%.cpp=$(BUILD)/tools/%.d)
