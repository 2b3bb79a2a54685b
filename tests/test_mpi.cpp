// Data-parallel training across processes (engine/comm.h, models/trainer.h; issue 20), run with OpenMPI's mpirun:
// 2 ranks × --batch B make the steps of 1 rank × --batch 2B (fp32: the same terms summed in another order) for the
// GPT, the CGT with the aux pass and R_C / R_D, and the kernel LM; two 2-rank runs are bit-identical; a 2-rank
// checkpoint resumes in 1 rank; an error on one rank ends both with one message. Skipped (visibly) where the build
// has no MPI or mpirun is missing.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "file_util.h"
#include "report/plot.h"
#include "run_binary.h"
#include "skip.h"

using namespace icl_test;

namespace {

Result mpirun(int np, const std::string& args) {
    return run_shell("mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(np) + " " + bin_dir() + "/" + args);
}

std::vector<double> losses(const std::string& dir) { return icl::read_csv(dir + "/log.csv").col("loss"); }

double worst_rel(const std::vector<double>& a, const std::vector<double>& b) {
    REQUIRE(a.size() == b.size());
    double w = 0;
    for (size_t i = 0; i < a.size(); i++) w = std::max(w, std::fabs(a[i] - b[i]) / std::fabs(a[i]));
    return w;
}

// 2 ranks × B vs 1 rank × 2B over `steps` steps, and a second 2-rank run (bit-identical log and model).
void check_equivalence(const std::string& cmd, int B, int steps) {
    TmpDir d;
    const std::string base = cmd + " --threads 1 --steps " + std::to_string(steps) + (cmd.find("--eval-every") == std::string::npos ? " --eval-every 5" : "");
    Result one = run(base + " --batch " + std::to_string(2 * B) + " --out " + (d / "one"));
    Result two = mpirun(2, base + " --batch " + std::to_string(B) + " --out " + (d / "two"));
    Result again = mpirun(2, base + " --batch " + std::to_string(B) + " --out " + (d / "again"));
    REQUIRE_MESSAGE(one.code == 0, std::string(cmd + ": " + one.err));
    REQUIRE_MESSAGE(two.code == 0, std::string(cmd + ": " + two.err));
    REQUIRE_MESSAGE(again.code == 0, std::string(cmd + ": " + again.err));
    const double w = worst_rel(losses(d / "one"), losses(d / "two"));
    MESSAGE(cmd << ": 2 ranks × --batch " << B << " vs 1 rank × --batch " << 2 * B << " over " << steps << " steps: largest relative loss difference " << w);
    // measured ≤ 5e-9 over 10 steps (2026-11-25, Zen 4, GPT / CGT / kernel LM): the gradient sums add the same terms
    // in another order; 1e-7 leaves room for other CPUs' vector paths (the issue asks ≤ 1e-5)
    CHECK(w <= 1e-7);
    CHECK(losses(d / "two") == losses(d / "again"));
    CHECK(slurp(d / "two/model.safetensors") == slurp(d / "again/model.safetensors"));
    CHECK(icl::read_csv(d / "two/log.csv").col("step").size() == (size_t)steps);  // rank 0 alone wrote it: one row per step
}

}  // namespace

TEST_SUITE("mpi") {

TEST_CASE("mpirun -np 2: 2 ranks × B = 1 rank × 2B (train_gpt, train_cgt with aux and regularizers, iclca train); two 2-rank runs bit-identical" * MPI_CASE) {
    check_equivalence("train_gpt --task arith --layers 2 --width 32 --heads 2", 4, 10);
    // R_D is a statistic of the batch a process sees (spec §3.5): without it the CGT step is the 2B step … (with a
    // mid-run evaluation: its validation passes draw aux positions, as many as the validation batch, whose size follows
    // --batch; the trainer puts the training streams back after every evaluation)
    check_equivalence("train_cgt --task arith --layers 3 --ell 2 --width 32 --dy 16 --heads 2 --heads-y 2 --eta 0.5 --wc 0.08 --wd 0 --eval-every 3", 4, 10);
    check_equivalence("iclca train --layers 2 --width 32 --heads 2 --seq 32", 4, 10);
    // … and with it, each rank's R_D is its micro-batch's: 2 ranks = 1 rank with --grad-accum 2 (largest relative loss
    // difference over 10 steps; log.csv of `run` in the run folder, or in its `sub` folder for a --compare run)
    auto accum_vs_two = [](const std::string& what, const std::string& cmd, const std::string& sub) {
        TmpDir d;
        Result acc = run(cmd + " --grad-accum 2 --out " + (d / "acc"));
        Result two = mpirun(2, cmd + " --out " + (d / "two"));
        REQUIRE_MESSAGE(acc.code == 0, acc.err);
        REQUIRE_MESSAGE(two.code == 0, two.err);
        const double w = worst_rel(losses(d / ("acc" + sub)), losses(d / ("two" + sub)));
        MESSAGE(what << ": 2 ranks × --batch 4 vs 1 rank × --batch 4 --grad-accum 2: largest relative loss difference " << w);
        CHECK(w <= 1e-7);
    };
    accum_vs_two("train_cgt with R_D",
                 "train_cgt --task arith --layers 3 --ell 2 --width 32 --dy 16 --heads 2 --heads-y 2 --eta 0.5 --wc 0.08 --wd 0.04 "
                 "--threads 1 --steps 10 --batch 4 --eval-every 5", "");
    // the VAE (sampled y: each rank draws and drops the other rank's noise) with a mid-run evaluation
    accum_vs_two("train_cgt VAE",
                 "train_cgt --task arith --layers 3 --ell 2 --width 32 --dy 16 --heads 2 --heads-y 2 --compare vae:0.05 --seeds 1 "
                 "--threads 1 --steps 10 --batch 4 --eval-every 5 --eval-seqs 16", "/vae-0.05-s1");
}

TEST_CASE("mpirun -np 2: duallens experiment's trained models (M1 and M2) reach the test nMSE of 1 process with twice the batch" * MPI_CASE) {
    TmpDir d;
    const std::string base = "duallens experiment --preset tiny --models m1,m2 --families baseline --threads 1";
    Result one = run(base + " --batch 8 --out " + (d / "one"));
    Result two = mpirun(2, base + " --batch 4 --out " + (d / "two"));
    REQUIRE_MESSAGE(one.code == 0, one.err);
    REQUIRE_MESSAGE(two.code == 0, two.err);
    const std::vector<double> a = icl::read_csv(d / "one/runs.csv").col("test_nmse"), b = icl::read_csv(d / "two/runs.csv").col("test_nmse");
    REQUIRE(a.size() == 2);
    REQUIRE(b.size() == 2);
    const double w = worst_rel(a, b);
    MESSAGE("duallens experiment M1, M2: 2 ranks × --batch 4 vs 1 rank × --batch 8: largest relative test-nMSE difference " << w);
    // runs.csv keeps 6 significant digits: equal in all of them (measured 0); 1 process × --batch 4 differs by 4e-3
    CHECK(w <= 1e-5);
}

TEST_CASE("mpirun -np 2 with --grad-accum 2 = 1 rank × 4B; a 2-rank checkpoint resumes in 1 rank (same global batch)" * MPI_CASE) {
    TmpDir d;
    const std::string base = "train_gpt --task arith --layers 2 --width 32 --heads 2 --threads 1 --steps 10 --eval-every 5";
    Result two = mpirun(2, base + " --batch 2 --grad-accum 2 --save-every 5 --out " + (d / "two"));
    Result one = run(base + " --batch 8 --out " + (d / "one"));
    REQUIRE_MESSAGE(two.code == 0, two.err);
    REQUIRE_MESSAGE(one.code == 0, one.err);
    CHECK(worst_rel(losses(d / "one"), losses(d / "two")) <= 1e-7);
    // steps 6..10 again from the 2-rank run's checkpoint, in one process with the same global batch (2 × 2 × 2 = 1 × 4 × 2)
    Result bad = run("train_gpt --resume " + (d / "two/checkpoint-5.safetensors") + " --out " + (d / "bad"));
    CHECK(bad.code == 2);
    CHECK(bad.err.find("the checkpoint's steps were 2 processes × 2 micro-batches = 4 per step; here 1 × 2 = 2") != std::string::npos);
    Result res = run("train_gpt --resume " + (d / "two/checkpoint-5.safetensors") + " --grad-accum 4 --out " + (d / "res"));
    REQUIRE_MESSAGE(res.code == 0, res.err);
    const std::vector<double> a = losses(d / "two"), b = losses(d / "res");  // res/log.csv: steps 6..10 (a new folder)
    REQUIRE(b.size() == 5);
    CHECK(icl::read_csv(d / "res/log.csv").col("step")[0] == 6);
    double w = 0;
    for (int s = 0; s < 5; s++) w = std::max(w, std::fabs(a[5 + s] - b[s]) / a[5 + s]);
    MESSAGE("2-rank checkpoint resumed in 1 rank: steps 6-10 largest relative loss difference " << w);
    CHECK(w <= 1e-7);
}

TEST_CASE("mpirun -np 2: an error on rank 1 ends both ranks with one message; a NaN on every rank is reported once" * MPI_CASE) {
    TmpDir d;
    // rank 0 starts a long run; rank 1 is given a bad flag (MPMD: two programs in one world)
    const auto t0 = std::chrono::steady_clock::now();
    Result r = run_shell("mpirun --allow-run-as-root --oversubscribe -np 1 " + bin_dir() + "/train_gpt --task arith --steps 100000 --threads 1 --out " +
                         (d / "a") + " : -np 1 " + bin_dir() + "/train_gpt --task arith --steps 0 --threads 1 --out " + (d / "b"));
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CAPTURE(r.err);
    CHECK(r.code != 0);
    CHECK(secs < 60);  // not a hang: rank 0's 100000 steps were stopped
    CHECK(r.err.find("error (rank 1 of 2): --steps") != std::string::npos);
    CHECK(r.err.find("error (rank 0") == std::string::npos);
    // a NaN parameter: the loss, summed over the ranks, is NaN on both at step 1; rank 0 reports it, alone
    Result ok = run("train_gpt --preset tiny --threads 1 --steps 1 --out " + (d / "m"));
    REQUIRE(ok.code == 0);
    std::string st = slurp(d / "m/model.safetensors");
    uint64_t hdr = 0;
    for (int i = 7; i >= 0; i--) hdr = hdr << 8 | (unsigned char)st[(size_t)i];
    for (size_t i = 0; i < 16; i++) {  // the first 16 floats of the data: NaN (0x7fc00000, little-endian)
        const unsigned char nan[4] = {0x00, 0x00, 0xc0, 0x7f};
        for (int b = 0; b < 4; b++) st[8 + hdr + 4 * i + b] = (char)nan[b];
    }
    spit(d / "nan.safetensors", st);
    r = mpirun(2, "train_gpt --task arith --load " + (d / "nan.safetensors") + " --threads 1 --steps 3 --out " + (d / "nan"));
    CAPTURE(r.err);
    CHECK(r.code != 0);
    CHECK(r.err.find("error (rank 0 of 2): step 1: the loss is NaN") != std::string::npos);
    CHECK(r.err.find("error (rank 1") == std::string::npos);
}

TEST_CASE("resume: a changed --grad-accum that changes the global batch is refused in one line (one process)") {
    TmpDir d;
    Result r = run("train_gpt --preset tiny --threads 1 --steps 4 --save-every 2 --grad-accum 2 --batch 2 --out " + (d / "a"));
    REQUIRE_MESSAGE(r.code == 0, r.err);
    r = run("train_gpt --resume " + (d / "a/checkpoint-2.safetensors") + " --grad-accum 1 --out " + (d / "b"));
    CHECK(r.code == 2);
    CHECK(r.err.find("--grad-accum 1: the checkpoint's steps were 1 process × 2 micro-batches = 2 per step; here 1 × 1 = 1") != std::string::npos);
}

TEST_CASE("a binary built without MPI, started as one of 2 processes, says so in one line (exit 2)" * NO_MPI_CASE) {
    Result r = run_shell("OMPI_COMM_WORLD_SIZE=2 " + bin_dir() + "/train_gpt --preset tiny --threads 1");
    CHECK(r.code == 2);
    CHECK(r.err.find("built without MPI: rebuild with `make mpi`") != std::string::npos);
}

}  // TEST_SUITE
