// The fuzz targets (tests/fuzz/fuzz_targets.h) replayed on every file of their seed corpus (real files the project
// writes, tests/fuzz/corpus/<target>/) and of every crash fuzzing has found (tests/fuzz/crashes/<target>/): each
// input is refused or accepted, never a crash or an escaping exception (under `make sanitize`, never a memory error).
// `make fuzz-run` searches for new ones.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "fuzz/fuzz_targets.h"
#include "run_binary.h"

namespace fs = std::filesystem;

TEST_SUITE("fuzz") {
TEST_CASE("every reader survives its seed corpus and the crash corpus") {
    const std::string root = icl_test::repo_root() + "/tests/fuzz";
    for (const icl_fuzz::Named& t : icl_fuzz::targets()) {
        int seeds = 0;
        for (const char* kind : {"corpus", "crashes"}) {
            const fs::path dir = fs::path(root) / kind / t.name;
            if (!fs::is_directory(dir)) continue;
            for (const auto& e : fs::directory_iterator(dir)) {
                if (!e.is_regular_file()) continue;
                const std::string bytes = icl_test::slurp(e.path().string());
                CAPTURE(e.path().string());
                CHECK_NOTHROW(t.run((const uint8_t*)bytes.data(), bytes.size()));
                seeds += std::string(kind) == "corpus";
            }
        }
        CAPTURE(t.name);
        CHECK(seeds >= 2);  // every target has real files to start from
    }
}
}
