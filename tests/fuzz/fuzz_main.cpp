// fuzz_main.cpp — the libFuzzer driver of one target of fuzz_targets.h, chosen at compile time (`make fuzz` builds
// build-fuzz/fuzz_<name> with -DICL_FUZZ_TARGET=<name>).
#include "fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return icl_fuzz::ICL_FUZZ_TARGET(data, size); }
