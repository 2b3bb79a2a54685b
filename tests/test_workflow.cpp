// The research workflow (models/trainer.h): resumable checkpoints, dumps that hold their batch, optimizer flags.
// A run resumed from its step-10 checkpoint continues bit for
// bit (log rows 11-20 and the final weights equal the uninterrupted run's) for train_gpt, train_cgt and iclca train;
// a resume with another configuration, a weights-only file or a finished run is refused in one line; a dump holds
// the batch, and the dumped logits, targets and mask give back the logged loss; --beta1/--beta2/--adam-eps reach AdamW.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/cli.h"
#include "engine/npy.h"
#include "models/trainer.h"
#include "engine/safetensors.h"
#include "report/plot.h"
#include "run_binary.h"
#include "skip.h"

namespace fs = std::filesystem;
using icl_test::Result;
using icl_test::run;

namespace {

std::string tmp_dir(const std::string& name) {
    std::string d = "/tmp/icl_resume_" + name + "_" + std::to_string(getpid());
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

// Every tensor of two checkpoints equal bit for bit (their metadata may differ: paths, dates).
void check_same_tensors(const std::string& a, const std::string& b) {
    icl::SafetensorsFile fa = icl::safetensors_open(a), fb = icl::safetensors_open(b);
    REQUIRE(fa.names() == fb.names());
    for (const std::string& n : fa.names()) {
        const icl::Shape shape = fa.info(n).shape;
        REQUIRE(fb.info(n).shape == shape);
        std::vector<float> x((size_t)icl::numel(shape)), y(x.size());
        fa.read(n, shape, x.data());
        fb.read(n, shape, y.data());
        CAPTURE(n);
        CHECK(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
    }
}

// log.csv's rows of steps [from, to] as text, without the timing columns.
std::vector<std::string> log_rows(const std::string& path, int from, int to) {
    icl::CsvTable t = icl::read_csv(path);
    std::vector<std::string> rows;
    for (size_t i = 0; i < t.rows(); i++) {
        const double step = t.col("step")[i];
        if (step < from || step > to) continue;
        std::string r;
        for (size_t c = 0; c < t.header.size(); c++)
            if (t.header[c] != "ms_per_step" && t.header[c] != "tokens_per_s") r += t.header[c] + "=" + icl::strfmt("%.17g", t.cols[c][i]) + " ";
        rows.push_back(r);
    }
    return rows;
}

// `cmd` trained 20 steps with checkpoints every 10, against the same run resumed from its step-10 checkpoint, once
// into a new folder and once in place (the checkpoint's folder, whose log holds all 20 rows: rows 11-20 replaced).
void check_resume(const std::string& name, const std::string& cmd) {
    const std::string d = tmp_dir(name);
    Result full = run(cmd + " --steps 20 --save-every 10 --out " + d + "/full");
    REQUIRE_MESSAGE(full.code == 0, full.err);
    REQUIRE(fs::exists(d + "/full/checkpoint-10.safetensors"));
    REQUIRE(fs::exists(d + "/full/checkpoint-20.safetensors"));

    Result r = run(cmd.substr(0, cmd.find(' ')) + (name == "iclca" ? " train" : "") + " --resume " + d + "/full/checkpoint-10.safetensors --out " + d + "/resumed");
    REQUIRE_MESSAGE(r.code == 0, r.err);
    CHECK(r.err.find("resuming") != std::string::npos);
    CHECK(log_rows(d + "/resumed/log.csv", 1, 20) == log_rows(d + "/full/log.csv", 11, 20));
    CHECK(log_rows(d + "/resumed/log.csv", 1, 20).size() == 10);
    check_same_tensors(d + "/full/model.safetensors", d + "/resumed/model.safetensors");
    check_same_tensors(d + "/full/checkpoint-20.safetensors", d + "/resumed/checkpoint-20.safetensors");

    // in place: the default --out is the checkpoint's folder; the log keeps steps 1-10 and gets 11-20 again
    fs::create_directories(d + "/inplace");
    for (const char* f : {"checkpoint-10.safetensors", "log.csv"}) fs::copy_file(d + "/full/" + f, d + "/inplace/" + f);
    r = run(cmd.substr(0, cmd.find(' ')) + (name == "iclca" ? " train" : "") + " --resume " + d + "/inplace/checkpoint-10.safetensors");
    REQUIRE_MESSAGE(r.code == 0, r.err);
    CHECK(log_rows(d + "/inplace/log.csv", 1, 20) == log_rows(d + "/full/log.csv", 1, 20));
    check_same_tensors(d + "/full/model.safetensors", d + "/inplace/model.safetensors");
    fs::remove_all(d);
}

int lines(const std::string& s) {
    int n = 0;
    for (char c : s) n += c == '\n';
    return n;
}

}  // namespace

TEST_SUITE("workflow") {
TEST_CASE("train_gpt resumed from step 10 = the uninterrupted run, bit for bit") {
    check_resume("gpt", "train_gpt --preset tiny --threads 2");
}

TEST_CASE("train_cgt (aux pass, regularizers, its own random stream) resumed from step 10 = the uninterrupted run") {
    check_resume("cgt", "train_cgt --preset tiny --threads 2");
}

TEST_CASE("iclca train (induction) resumed from step 10 = the uninterrupted run") {
    check_resume("iclca", "iclca train --preset tiny --threads 2");
}

TEST_CASE("a resume that cannot continue the run is refused in one line") {
    const std::string d = tmp_dir("refused");
    Result full = run("train_gpt --preset tiny --steps 10 --save-every 5 --out " + d);
    REQUIRE_MESSAGE(full.code == 0, full.err);
    const std::string ck = d + "/checkpoint-5.safetensors";
    struct Case { std::string cmd; int code; const char* needle; };
    const Case cases[] = {
        {"train_gpt --resume " + ck + " --lr 5e-3", 2, "--lr '5e-3': the run in"},
        {"train_gpt --resume " + ck + " --width 64", 2, "a resumed run keeps its configuration"},
        {"train_gpt --resume " + ck + " --load " + ck, 2, "--load: not with --resume"},
        {"train_gpt --resume " + ck + " --steps 5", 2, "already at step 5"},
        {"train_gpt --resume " + ck + " --dump-npy " + d + "/dd --dump-step 3", 2, "--dump-step 3: the run resumes at step 6"},
        {"train_gpt --resume " + d + "/model.safetensors", 1, "not resumable"},
        {"train_cgt --resume " + ck, 1, "'gpt' model"},
        {"iclca e1 --save-every 5", 2, "--save-every: iclca e1 does not use it"},
        {"iclca e1 --resume " + ck, 2, "--resume: iclca e1 does not use it"},
        {"iclca e3 --load " + ck, 2, "--load: iclca e3 does not use it"},
        {"iclca e2 --load " + ck + " --layers 3", 1, "'gpt' model, not a kernel LM"},
        {"duallens features --load /nonexistent.safetensors", 2, "--load: duallens features does not use it"},
        {"duallens check --save x.safetensors", 2, "--save: duallens check does not use it"},
        {"tint eps --save x.safetensors", 2, "--save: tint eps does not use it (only train)"},
        {"gradcheck --dy 8", 2, "--dy: a CGT flag; use --model cgt"},
        {"gradcheck --vocab 9", 2, "--vocab: only --task random reads it"},
        {"bench gemm --ell 2", 2, "--ell: bench gemm does not use it (only cgt)"},
        {"duallens features --steps 10", 2, "--steps: duallens features does not use it (only experiment)"},
        {"duallens check --features 64", 2, "--features: duallens check does not use it (only features)"},
        {"duallens check --beta2 0.99", 2, "--beta2: duallens check does not use it (only experiment)"},
        {"tint params --adam-eps 1e-6", 2, "--adam-eps: tint params does not use it (only train, lm, fewshot)"},
        // tint lm / fewshot check every flag before training their auxiliary model (one line: no training started;
        // --steps 2 keeps a regression short)
        {"tint lm --S 5 --steps 2 --out " + d + "/tint", 2, "--S: must divide the auxiliary width d = 48"},
        {"tint lm --gate-scale 1e9 --steps 2 --out " + d + "/tint", 2, "--gate-scale: must be in"},
        {"tint lm --windows 100000 --steps 2 --out " + d + "/tint", 1, "asked for 16 dev + 100000 test"},
        {"tint check --budgets 1:1", 2, "--budgets: tint check does not use it (only lm, fewshot)"},
        {"tint lm --load " + ck + " --steps 5", 2, "--steps: the auxiliary model comes from --load, nothing is trained"},
        {"tint fewshot --H-sim 0 --steps 2 --out " + d + "/tint", 2, "--H-sim: must be in"},
        {"tint fewshot --demos 64 --seq 32 --steps 2 --out " + d + "/tint", 2, "--demos 64: a Multi-format episode has"},
        {"tint fewshot --labels swapped --steps 2 --out " + d + "/tint", 2, "--labels"},
    };
    for (const Case& c : cases) {
        Result r = run(c.cmd);
        CAPTURE(c.cmd);
        CAPTURE(r.err);
        CHECK(r.code == c.code);
        CHECK(r.err.find(c.needle) != std::string::npos);
        CHECK(lines(r.err) == 1);
    }
    // a longer run than the checkpoint's: allowed, with a note (the cosine schedule follows the new length)
    Result longer = run("train_gpt --resume " + ck + " --steps 12 --out " + d + "/longer");
    CHECK_MESSAGE(longer.code == 0, longer.err);
    CHECK(longer.err.find("the cosine schedule follows the new length") != std::string::npos);
    fs::remove_all(d);
}

TEST_CASE("a dump holds its batch: the dumped logits, targets and mask give the logged loss of that step") {
    const std::string d = tmp_dir("dump");
    Result r = run("train_gpt --preset tiny --steps 3 --dump-npy " + d + "/dump --dump-step 2 --out " + d + "/run");
    REQUIRE_MESSAGE(r.code == 0, r.err);
    nlohmann::json index = nlohmann::json::parse(icl_test::slurp(d + "/dump/index.json"));
    CHECK(index["step"] == 2);
    std::vector<std::string> batch;
    for (auto& t : index["tensors"])
        if (t["kind"] == "batch") batch.push_back(t["name"]);
    CHECK(batch == std::vector<std::string>{"batch.tokens", "batch.targets", "batch.mask", "batch.pos"});
    // each parameter says whether AdamW decays it (--help points here): matrices and wte yes, wpe and biases no
    std::map<std::string, bool> decay;
    for (auto& t : index["tensors"])
        if (t["kind"] == "parameter") decay[t["name"]] = t["decay"].get<bool>();
    CHECK(decay.at("wte"));
    CHECK(decay.at("h.0.attn.qkv.w"));
    CHECK_FALSE(decay.at("wpe"));
    CHECK_FALSE(decay.at("h.0.attn.qkv.b"));
    CHECK_FALSE(decay.at("h.0.ln1.w"));
    icl::NpyArray logits = icl::npy_load(d + "/dump/logits.npy"), targets = icl::npy_load(d + "/dump/batch.targets.npy"),
                  mask = icl::npy_load(d + "/dump/batch.mask.npy");
    REQUIRE(logits.shape.size() == 3);
    const int64_t N = logits.shape[0] * logits.shape[1], V = logits.shape[2];
    REQUIRE(targets.size() == N);
    std::vector<float> lg = logits.as<float>(), w = mask.as<float>();
    std::vector<int32_t> tg = targets.as<int32_t>();
    double num = 0, den = 0;  // the masked mean cross-entropy, in double
    for (int64_t i = 0; i < N; i++) {
        if (tg[i] < 0 || w[i] == 0) continue;
        double mx = -1e300, se = 0;
        for (int64_t v = 0; v < V; v++) mx = std::max(mx, (double)lg[i * V + v]);
        for (int64_t v = 0; v < V; v++) se += std::exp((double)lg[i * V + v] - mx);
        num += w[i] * (std::log(se) + mx - lg[i * V + tg[i]]);
        den += w[i];
    }
    const double logged = icl::read_csv(d + "/run/log.csv").col("loss")[1];
    CHECK(std::fabs(num / den - logged) <= 2e-6 * logged);  // fp32 logits and loss vs this double sum (measured ~1e-7)

    // CGT: the aux pass's start positions are part of the batch
    r = run("train_cgt --preset tiny --steps 1 --dump-npy " + d + "/cdump --out " + d + "/crun");
    REQUIRE_MESSAGE(r.code == 0, r.err);
    CHECK(fs::exists(d + "/cdump/batch.aux_start.npy"));
    CHECK(icl::npy_load(d + "/cdump/batch.aux_start.npy").shape == icl::Shape{icl::npy_load(d + "/cdump/batch.tokens.npy").shape[0]});
    // the attention probabilities, rebuilt from each block's saved lse (layers/attention.h): with the masked aux pass,
    // row i of sequence b attends to keys max(p_b, …) … i only (a row before p_b: to itself), and sums to 1
    r = run("train_cgt --preset tiny --steps 1 --aux-pass masked --dump-npy " + d + "/mdump --out " + d + "/mrun");
    REQUIRE_MESSAGE(r.code == 0, r.err);
    const std::vector<int32_t> ps = icl::npy_load(d + "/mdump/batch.aux_start.npy").as<int32_t>();
    for (const char* name : {"h.0.att", "aux.h.0.att"}) {
        CAPTURE(name);
        const icl::NpyArray a = icl::npy_load(d + "/mdump/" + name + ".npy");
        REQUIRE(a.shape.size() == 4);
        const int64_t B = a.shape[0], NH = a.shape[1], T = a.shape[2];
        REQUIRE((size_t)B == ps.size());
        const std::vector<float> p = a.as<float>();
        double worst_sum = 0, outside = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < NH; h++)
                for (int64_t i = 0; i < T; i++) {
                    const int64_t lo = std::string(name) == "h.0.att" ? 0 : i < ps[b] ? i : ps[b];
                    double sum = 0;
                    for (int64_t j = 0; j < T; j++) {
                        const double v = p[((b * NH + h) * T + i) * T + j];
                        if (j >= lo && j <= i) sum += v;
                        else outside = std::max(outside, std::fabs(v));
                    }
                    worst_sum = std::max(worst_sum, std::fabs(sum - 1));
                }
        CHECK(outside == 0.0);
        CHECK(worst_sum <= 1e-5);
    }
    fs::remove_all(d);
}

TEST_CASE("--beta1 --beta2 --adam-eps --weight-decay reach AdamW; out-of-range values are usage errors") {
    const std::string d = tmp_dir("flags");
    auto options = [&](std::vector<std::string> args) {
        icl::Cli cli("t", "test");
        icl::add_common_flags(cli, {});
        icl::add_train_flags(cli);
        cli.parse(args);
        return icl::train_options(cli, "t", d, 1, 10);
    };
    icl::TrainOptions o = options({});
    CHECK(o.adam.beta1 == 0.9f);
    CHECK(o.adam.beta2 == 0.95f);
    CHECK(o.adam.eps == 1e-8f);
    o = options({"--beta1", "0.8", "--beta2", "0.999", "--adam-eps", "1e-6", "--weight-decay", "0.1"});
    CHECK(o.adam.beta1 == 0.8f);
    CHECK(o.adam.beta2 == 0.999f);
    CHECK(o.adam.eps == 1e-6f);
    CHECK(o.adam.weight_decay == 0.1f);
    for (auto bad : {std::vector<std::string>{"--beta2", "1"}, {"--beta1", "-0.1"}, {"--adam-eps", "0"}, {"--beta2", "nan"}})
        CHECK_THROWS_AS(options(bad), icl::Error);
    // the paper presets use spec/cgt.md's optimizer: β = (0.9, 0.999), cosine to 0 (one step of the paper's baseline)
    Result r = run("train_gpt --preset paper-arith --steps 1 --batch 2 --eval-batches 1 --out " + d + "/paper");
    REQUIRE_MESSAGE(r.code == 0, r.err);
    nlohmann::json s = nlohmann::json::parse(icl_test::slurp(d + "/paper/summary.json"));
    CHECK(s["flags"]["beta2"] == "0.999");
    CHECK(s["flags"]["min-lr-frac"] == "0");
    fs::remove_all(d);
}

TEST_CASE("val_answer_acc is a number with 1 or 2 examples per task (the last example is scored)") {
    const std::string d = tmp_dir("nex");
    for (const char* n : {"1", "2"}) {
        Result r = run(std::string("train_gpt --preset tiny --steps 2 --n-ex ") + n + " --out " + d + "/r" + n);
        REQUIRE_MESSAGE(r.code == 0, r.err);
        nlohmann::json s = nlohmann::json::parse(icl_test::slurp(d + "/r" + n + "/summary.json"));
        CAPTURE(n);
        CHECK(s["final_val_answer_acc"].is_number());
    }
    fs::remove_all(d);
}

TEST_CASE("a full disk (a 200 KiB tmpfs) during a save and a dump: one-line error, exit 1, the old checkpoint intact" * TMPFS_CASE) {
    // The tmpfs lives in a private mount namespace for the length of one shell script, so the script checks what is
    // left on it and reports; stderr goes to files outside it. A tiny model's checkpoint (~137 KB) fits once, not twice.
    const std::string d = tmp_dir("fulldisk"), disk = d + "/disk";
    fs::create_directories(disk);
    const std::string b = icl_test::bin_dir();
    const std::string script =
        "D=" + disk + "; O=" + d + "\n"
        "mount -t tmpfs -o size=200k tmpfs $D || exit 90\n"
        "" + b + "/train_gpt --preset tiny --steps 2 --seed 1 --save $D/m.safetensors --out $O/run1 >/dev/null 2>$O/err1; echo first=$?\n"
        "cp $D/m.safetensors $O/copy.safetensors\n"
        "" + b + "/train_gpt --preset tiny --steps 2 --seed 2 --save $D/m.safetensors --out $O/run2 >/dev/null 2>$O/err2; echo second=$?\n"
        "cmp -s $D/m.safetensors $O/copy.safetensors && echo same=yes\n"
        "echo left=$(ls -A $D | tr '\\n' ' ')\n"
        "" + b + "/train_gpt --preset tiny --steps 1 --dump-npy $D/dump --out $O/run3 >/dev/null 2>$O/err3; echo dump=$?\n"
        "echo tmp=$(ls -A $D/dump | grep -c tmp)\n";
    icl_test::spit(d + "/fill.sh", script);
    Result r = icl_test::run_shell("unshare -rm sh " + d + "/fill.sh");
    CAPTURE(r.out);
    CAPTURE(r.err);
    REQUIRE(r.code == 0);
    CHECK(r.out.find("first=0") != std::string::npos);
    CHECK(r.out.find("second=1") != std::string::npos);
    CHECK(r.out.find("same=yes") != std::string::npos);   // the failed save left the previous file byte-identical
    CHECK(r.out.find("left=m.safetensors\n") != std::string::npos);  // and no temporary beside it
    CHECK(r.out.find("dump=1") != std::string::npos);
    CHECK(r.out.find("tmp=0") != std::string::npos);
    for (const char* e : {"/err2", "/err3"}) {
        const std::string err = icl_test::slurp(d + e);
        CAPTURE(err);
        // the progress lines, then one error line naming the file and the cause
        const size_t at = err.find("error: cannot write " + disk + "/");
        REQUIRE(at != std::string::npos);
        CHECK(lines(err.substr(at)) == 1);
        CHECK(err.find("No space left on device", at) != std::string::npos);
    }
    fs::remove_all(d);
}

TEST_CASE("tint lm --seeds 3: one study per seed and a table of means ± 95% CI with the paired change vs vanilla") {
    const std::string d = tmp_dir("tintseeds");
    Result r = run("tint lm --preset tiny --seeds 3 --out " + d);
    REQUIRE_MESSAGE(r.code == 0, r.err);
    CHECK(r.out.find("# tint lm over 3 seeds") != std::string::npos);
    const nlohmann::json s = nlohmann::json::parse(icl_test::slurp(d + "/summary.json"));
    CHECK(s["seeds"] == 3);
    CHECK(s["provenance"]["seeds"] == 3);
    REQUIRE(!s["rows"].empty());
    // recompute the first arm's paired change from the three runs' own summaries
    std::vector<double> change;
    for (int k = 1; k <= 3; k++) {
        const nlohmann::json one = nlohmann::json::parse(icl_test::slurp(d + "/seed" + std::to_string(k) + "/summary.json"));
        CHECK(one["flags"]["seed"] == std::to_string(k));
        CHECK(one["provenance"]["seed"] == k);  // each seed's own record, not the whole run's
        CHECK(one["provenance"]["seeds"] == 1);
        const nlohmann::json& row = one["rows"][0];
        change.push_back(100 * (row["ppl_test"].get<double>() / row["ppl_vanilla"].get<double>() - 1));
    }
    CHECK(change[0] != change[1]);  // the seeds train different auxiliary models
    const double mean = (change[0] + change[1] + change[2]) / 3;
    double var = 0;
    for (double c : change) var += (c - mean) * (c - mean) / 2;
    CHECK(s["rows"][0]["change_pct"].get<double>() == doctest::Approx(mean).epsilon(1e-12));
    CHECK(s["rows"][0]["change_pct_ci95"].get<double>() == doctest::Approx(4.302652729749464 * std::sqrt(var / 3)).epsilon(1e-4));  // t95(2); analysis.h tabulates 4.303
    CHECK(fs::exists(d + "/table.md"));
    Result bad = run("tint lm --preset tiny --seeds 2 --load " + d + "/seed1/aux.safetensors");
    CHECK(bad.code == 2);
    CHECK(bad.err.find("--seeds: tint lm with a given model has nothing random") != std::string::npos);
    fs::remove_all(d);
}
}
