// test_sweep.cpp — tools/sweep.cpp: a grid × seeds through a real binary (train_gpt's tiny preset, ~0.2 s a run),
// the table's means and 95% intervals against the runs' own summaries, resuming (only unfinished runs rerun, the
// finished ones untouched), a failing run, and every refusal.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "file_util.h"
#include "report/analysis.h"
#include "run_binary.h"

namespace {

using icl_test::slurp;
using icl_test::TmpDir;

nlohmann::json json_of(const std::string& path) { return nlohmann::json::parse(slurp(path)); }

int64_t mtime_ns(const std::string& path) {
    struct stat st {};
    REQUIRE(stat(path.c_str(), &st) == 0);
    return (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
}

}  // namespace

TEST_SUITE("sweep") {

TEST_CASE("sweep: a 2×2 grid × 2 seeds of train_gpt; means and 95% intervals = the runs' own summaries; resumes; a failing run") {
    TmpDir d;
    const std::string grid = " --grid '--lr=1e-3,1e-2;--layers=1,2' --metric val=/final_val_loss,acc=/final_val_answer_acc --seeds 2 --seed 5 --out ";
    const std::string cmd = " -- train_gpt --preset tiny --threads 1";
    icl_test::Result r = icl_test::run("sweep" + grid + (d / "s") + cmd);
    CAPTURE(r.err);
    REQUIRE(r.code == 0);
    const nlohmann::json j = json_of(d / "s/summary.json");
    REQUIRE(j["cells"].size() == 4);
    CHECK(j["runs_this_time"] == 4 * 2);
    CHECK(j["provenance"]["seeds"] == 2);
    // every cell: its runs got the grid's flags and seeds 5, 6; the mean and interval are those of their summaries
    for (const auto& c : j["cells"]) {
        const std::string cell = c["cell"];
        std::vector<double> val;
        for (int k = 1; k <= 2; k++) {
            const nlohmann::json run = json_of(d / "s" + "/" + cell + "/seed" + std::to_string(k) + "/summary.json");
            CHECK(run["flags"]["lr"] == c["flags"]["--lr"]);  // a run's summary names its flags without the dashes
            CHECK(run["flags"]["layers"] == c["flags"]["--layers"]);
            CHECK(run["flags"]["seed"] == std::to_string(4 + k));
            val.push_back(run["final_val_loss"].get<double>());
            CHECK(std::filesystem::exists(d / "s" + "/" + cell + "/seed" + std::to_string(k) + ".log"));
        }
        const double mean = (val[0] + val[1]) / 2, sd = std::fabs(val[0] - val[1]) / std::sqrt(2.0);
        CHECK(c["metrics"]["val"]["mean"].get<double>() == doctest::Approx(mean).epsilon(1e-12));
        CHECK(c["metrics"]["val"]["ci95"].get<double>() == doctest::Approx(12.706 * sd / std::sqrt(2.0)).epsilon(1e-3));  // t(0.975, 1 df)
    }
    CHECK(slurp(d / "s/table.md").find("| 1e-2 | 2 |") != std::string::npos);
    CHECK(std::filesystem::exists(d / "s/val.png"));
    CHECK(std::filesystem::exists(d / "s/acc.png"));
    std::istringstream csv(slurp(d / "s/results.csv"));
    int rows = 0;
    for (std::string line; std::getline(csv, line);) rows += !line.empty() && line[0] != '#';
    CHECK(rows == 1 + 8);
    // resume: one run "interrupted" (its summary gone) reruns, the other seven are kept untouched
    const std::string gone = d / "s/lr-1e-2_layers-1/seed2/summary.json", kept = d / "s/lr-1e-3_layers-2/seed1/summary.json";
    const std::string kept_bytes = slurp(kept);
    const int64_t kept_time = mtime_ns(kept);
    std::filesystem::remove(gone);
    r = icl_test::run("sweep" + grid + (d / "s") + cmd);
    REQUIRE(r.code == 0);
    CHECK(json_of(d / "s/summary.json")["runs_this_time"] == 1);
    CHECK(std::filesystem::exists(gone));
    CHECK(slurp(kept) == kept_bytes);
    CHECK(mtime_ns(kept) == kept_time);
    CHECK(r.err.find("finished before, kept") != std::string::npos);
    // the same table: the rerun run is deterministic (same seed, same threads)
    CHECK(json_of(d / "s/summary.json")["cells"] == j["cells"]);
    // a run that fails stops the sweep (exit 1) naming the cell; the finished runs stay
    r = icl_test::run("sweep --grid '--layers=1,0' --metric val=/final_val_loss --seeds 1 --out " + (d / "f") + cmd);
    CHECK(r.code == 1);
    CHECK(r.err.find("layers-0 seed 1 failed") != std::string::npos);
    CHECK(std::filesystem::exists(d / "f/layers-1/seed1/summary.json"));
}

TEST_CASE("sweep: presets, --dry-run, and every refusal is one line") {
    TmpDir d;
    icl_test::Result r = icl_test::run("sweep --list");
    REQUIRE(r.code == 0);
    for (const char* n : {"cgt-ell", "cgt-rank", "cgt-templates", "cgt-wcwd", "cgt-single-task", "cgt-lr-ell", "cgt-lr-dims"})
        CHECK(r.out.find(n) != std::string::npos);
    r = icl_test::run("sweep --preset cgt-wcwd --dry-run --seeds 2 --out " + (d / "w"));
    REQUIRE(r.code == 0);
    CHECK(r.out.find("4 cells × 2 seeds") == std::string::npos);  // 4 × 3 = 12 cells
    CHECK(r.out.find("12 cells × 2 seeds = 24 runs") != std::string::npos);
    CHECK(r.out.find("--preset icl-mini --seeds 1 --compare aux-reg --threads 1 --wc=0.08 --wd=0.02 --seed 2 --out " + (d / "w") + "/wc-0.08_wd-0.02/seed2") !=
          std::string::npos);
    CHECK(!std::filesystem::exists(d / "w/table.md"));
    r = icl_test::run("sweep --preset cgt-ell --paper --dry-run --seeds 1 --out " + (d / "p"));
    REQUIRE(r.code == 0);
    CHECK(r.out.find("--preset icl-table1") != std::string::npos);
    CHECK(r.out.find("--device cuda") != std::string::npos);
    CHECK(r.out.find("--ell=5 --seed 1") != std::string::npos);  // the paper's grid (L = 6)
    // every CPU preset's metrics exist in what its runs write: each run for a few steps (flags after "--" are added)
    struct Smoke { const char* preset; const char* grid; };
    for (Smoke s : {Smoke{"cgt-ell", "--ell=2"}, Smoke{"cgt-single-task", "--compare=baseline,aux-reg"}, Smoke{"cgt-lr-dims", "--width=64"}}) {
        r = icl_test::run(std::string("sweep --preset ") + s.preset + " --grid '" + s.grid + "' --seeds 1 --out " + (d / s.preset) +
                          " -- --steps 3 --eval-every 0 --eval-seqs 8 --batch 4");
        CAPTURE(s.preset);
        CAPTURE(r.err);
        CHECK(r.code == 0);
        CHECK(std::filesystem::exists(d / s.preset + "/table.md"));
    }
    struct Case { std::string args; int code; const char* needle; };
    const std::string m = " --metric v=/final_val_loss --seeds 1 --out " + (d / "x");
    for (const Case& k : {Case{"sweep --grid '--lr=1e-3'" + m, 2, "no command"},
                          Case{"sweep --grid 'lr=1e-3'" + m + " -- train_gpt", 2, "--grid: expected '--flag=v1,v2,…'"},
                          Case{"sweep --grid '--lr=1e-3,,2'" + m + " -- train_gpt", 2, "--grid: an empty value"},
                          Case{"sweep --grid '--lr=1;--lr=2'" + m + " -- train_gpt", 2, "--grid: --lr given twice"},
                          Case{"sweep --grid '--lr=1e-3' --metric v=final --out " + (d / "x") + " -- train_gpt", 2, "--metric: expected NAME=/json/pointer"},
                          Case{"sweep --grid '--lr=1e-3'" + m + " -- train_gpt --seed 3", 2, "--seed: the sweep sets it"},
                          Case{"sweep --grid '--lr=1e-3'" + m + " -- train_gpt --lr 1", 2, "--lr: it is on the grid"},
                          Case{"sweep --preset nope", 2, "--preset: unknown preset 'nope'"},
                          Case{"sweep --preset cgt-ell -- train_gpt", 2, "--preset: it brings its own command; after '--' give only flags"},
                          Case{"sweep --paper --grid '--lr=1'" + m + " -- train_gpt", 2, "--paper: only with --preset"},
                          Case{"sweep --grid '--lr=1e-3'" + m + " -- no_such_binary", 1, "no_such_binary is not an executable"},
                          Case{"sweep --grid '--lr=1e-3' --metric v=/no/such --seeds 1 --out " + (d / "y") + " -- train_gpt --preset tiny --threads 1", 1,
                               "no number at /no/such (metric v)"}}) {
        icl_test::Result x = icl_test::run(k.args);
        CAPTURE(k.args);
        CAPTURE(x.err);
        CHECK(x.code == k.code);
        CHECK(x.err.find(k.needle) != std::string::npos);
        CHECK(x.err.find('\n') == x.err.size() - 1);  // one line
    }
}

}  // TEST_SUITE
