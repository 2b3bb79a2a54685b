# icl.cpp — primary build.
#
#   make              build every CPU binary into build/
#   make test         build and run all doctest suites (CPU; GPU tests skip without a GPU)
#   make run          the main job (see README)
#   make bench        CPU benchmarks (GEMM GFLOP/s, train step time)
#   make sanitize     the test suite under AddressSanitizer + UndefinedBehaviorSanitizer
#   make deps         install the Debian packages the build needs (as root) or print the command
#
# Portable build (no -march=native, e.g. for a binary you copy to another machine):
#   make ARCH_FLAGS="-mavx2 -mfma"      or      make ARCH_FLAGS=
SHELL      := /bin/bash
CXX        ?= g++
ARCH_FLAGS ?= -march=native
OPT_FLAGS  ?= -O3
CXXFLAGS   ?= $(OPT_FLAGS) $(ARCH_FLAGS)
ALL_CXXFLAGS = -std=c++17 -fopenmp -Wall -Wextra -Wno-unused-parameter -Isrc -MMD -MP $(CXXFLAGS)
LDFLAGS    ?=
LDLIBS     = -fopenmp -lm
BUILD      ?= build
NPROC      := $(shell nproc 2>/dev/null || echo 2)
MAKEFLAGS  += -j$(NPROC)

# Debian packages the build needs (DESIGN.md "Dependencies"). python3-numpy is optional: the npy test
# uses it to prove NumPy reads our files when it is there.
DEB_PKGS   = doctest-dev libstb-dev nlohmann-json3-dev
DEP_HEADERS = /usr/include/doctest/doctest.h /usr/include/stb/stb_image_write.h /usr/include/nlohmann/json.hpp

LIB_SRCS   = $(wildcard src/engine/*.cpp src/layers/*.cpp src/models/*.cpp src/data/*.cpp)
BIN_SRCS   = $(wildcard src/*.cpp)
TOOL_SRCS  = $(wildcard tools/*.cpp)
TEST_SRCS  = $(wildcard tests/*.cpp)

LIB_OBJS   = $(LIB_SRCS:%.cpp=$(BUILD)/%.o)
BINS       = $(BIN_SRCS:src/%.cpp=$(BUILD)/%)
TOOLS      = $(TOOL_SRCS:tools/%.cpp=$(BUILD)/%)
TEST_OBJS  = $(TEST_SRCS:%.cpp=$(BUILD)/%.o)
TEST_BIN   = $(BUILD)/test_icl

.PHONY: all test run bench sanitize deps clean
.SECONDARY:
all: deps $(BINS) $(TOOLS)

deps:
	@missing=""; for h in $(DEP_HEADERS); do [ -f $$h ] || missing=1; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian packages: $(DEB_PKGS) python3-numpy"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(DEB_PKGS) >/dev/null \
	      && (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-numpy >/dev/null || true)) \
	      || { echo "error: apt-get failed; install by hand: apt-get install $(DEB_PKGS)"; exit 1; }; \
	  else \
	    echo "error: missing build dependencies; run:  sudo apt-get install $(DEB_PKGS)"; exit 1; \
	  fi; \
	fi

$(BUILD)/libicl.a: $(LIB_OBJS)
	@mkdir -p $(@D)
	ar rcs $@ $^

$(BUILD)/%.o: %.cpp | deps
	@mkdir -p $(@D)
	$(CXX) $(ALL_CXXFLAGS) -c $< -o $@

$(BUILD)/%: $(BUILD)/src/%.o $(BUILD)/libicl.a
	$(CXX) $(LDFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/%: $(BUILD)/tools/%.o $(BUILD)/libicl.a
	$(CXX) $(LDFLAGS) $^ -o $@ $(LDLIBS)

$(TEST_BIN): $(TEST_OBJS) $(BUILD)/libicl.a
	$(CXX) $(LDFLAGS) $^ -o $@ $(LDLIBS)

# The test suites find the project's binaries (CLI tests) through ICL_BIN_DIR.
# The last line is the plain summary "tests: N passed, N failed, N skipped".
test: all $(TEST_BIN)
	@set -o pipefail; ICL_BIN_DIR=$(BUILD) OMP_NUM_THREADS=2 ./$(TEST_BIN) 2>&1 | tee $(BUILD)/test.log; st=$$?; \
	awk '/^\[doctest\] test cases:/ { print "tests: " $$6 " passed, " $$9 " failed, " $$12 " skipped" }' $(BUILD)/test.log; \
	exit $$st

# The main job (until the CGT experiments exist): the GPT baseline on the ICL arithmetic task.
run: all
	OMP_NUM_THREADS=$(NPROC) ./$(BUILD)/train_gpt --preset arith

bench: all
	OMP_NUM_THREADS=$(NPROC) ./$(BUILD)/bench

sanitize:
	$(MAKE) BUILD=build-san OPT_FLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" \
	  LDFLAGS="-fsanitize=address,undefined" test

clean:
	rm -rf build build-san build-cuda

-include $(LIB_OBJS:.o=.d) $(TEST_OBJS:.o=.d) $(BIN_SRCS:src/%.cpp=$(BUILD)/src/%.d) $(TOOL_SRCS:tools/%.cpp=$(BUILD)/tools/%.d)
