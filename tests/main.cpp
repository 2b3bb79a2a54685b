// The doctest runner: every tests/*.cpp suite links into one binary, build/test_icl.
// Run one suite with  build/test_icl -ts="npy"   (list them with -lts).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
