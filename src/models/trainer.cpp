// trainer.cpp — the training options and summary every trainer shares (see trainer.h).
#include "models/trainer.h"

#include <filesystem>

#include "engine/fileio.h"
#include "engine/provenance.h"
#include "engine/run.h"

namespace icl {

void add_train_flags(Cli& cli) {
    cli.flag("--warmup", "20", "warm-up steps: step s (1-based) <= N trains at lr*s/N");
    cli.flag("--min-lr-frac", "0.1", "after warm-up, cosine decay from --lr at step N+1 towards lr*frac, reached one step after the last");
    add_adamw_flags(cli);
    cli.flag("--weight-decay", "0.0",
             "AdamW decoupled weight decay, on the weight matrices and the token embedding wte; never on biases, layer-norm "
             "gains and biases, position embeddings (wpe, wpe_y) or ICLCA's bias terms (index.json's 'decay' says per tensor)");
    cli.flag("--grad-clip", "1.0", "clip the global gradient norm to this (0 = off)");
    cli.flag("--eval-every", "50", "evaluate every N steps (and at the end)");
    cli.flag("--eval-batches", "4", "validation batches per evaluation");
    cli.flag("--save-every", "0", "every N steps, a resumable RUN/checkpoint-<step>.safetensors (weights + AdamW state; 0 = none)");
    cli.flag("--resume", "", "continue the run of this checkpoint-<step>.safetensors: its flags, weights, AdamW state, data stream "
                             "(bit-identical to not stopping, with the same --threads); only --steps --out --save --save-every "
                             "--threads --device --tf32 --dump-npy --dump-step may be given");
    cli.flag("--dump-step", "1", "with --dump-npy: the training step to dump (1 = the first)");
    add_grad_accum_flag(cli);
}

void add_grad_accum_flag(Cli& cli) {
    cli.flag("--grad-accum", "1", "micro-batches per step: K batches of --batch, their gradients summed, make one step — the step of one "
                                  "batch of K·B to fp32 rounding (memory of B); the CGT's R_D and R_P are then per micro-batch");
}

int grad_accum_from_cli(const Cli& cli) {
    const int k = (int)cli.get_int("--grad-accum", 1, 1 << 16);
    if (k > 1 && cli.has_value("--dump-npy")) fail_usage("--dump-npy: dumps one batch's step; not with --grad-accum > 1");
    return k;
}

void add_adamw_flags(Cli& cli) {
    cli.flag("--beta1", "0.9", "AdamW beta1 (first-moment decay)");
    cli.flag("--beta2", "0.95", "AdamW beta2 (second-moment decay; spec/cgt.md's paper presets use 0.999)");
    cli.flag("--adam-eps", "1e-8", "AdamW epsilon (added to sqrt(v); --eps is the kernel LM's and TinT's own)");
}

AdamWConfig adamw_from_cli(const Cli& cli) {
    AdamWConfig a;
    a.beta1 = (float)cli.get_double("--beta1", 0, 0.999999);
    a.beta2 = (float)cli.get_double("--beta2", 0, 0.999999);
    a.eps = (float)cli.get_double("--adam-eps", 1e-30, 1);
    return a;
}

// --grad-accum may change with the number of processes (engine/comm.h), as long as processes × micro-batches per step
// stays the checkpoint's (restore_train_state checks it): a 2-rank run resumes in 1 rank with twice the accumulation.
const std::vector<std::string> kResumeMayChange = {"--resume", "--steps", "--out", "--save", "--save-every", "--threads",
                                                   "--device", "--tf32", "--dump-npy", "--dump-step", "--sample", "--temperature",
                                                   "--grad-accum"};

std::string architecture_checkpoint(const Cli& cli) {
    if (cli.has_flag("--resume") && cli.has_value("--resume")) return cli.get("--resume");
    return cli.has_value("--load") ? cli.get("--load") : "";
}

void resume_flags(Cli& cli) {
    if (!cli.has_flag("--resume") || !cli.has_value("--resume")) return;
    if (cli.given("--load")) fail_usage("--load: not with --resume (the weights come from the resumed checkpoint)");
    const std::string path = cli.get("--resume");
    CheckpointInfo ci = read_checkpoint_metadata(path);
    if (!ci.metadata.count("train_state") || !ci.metadata.count("flags"))
        fail("checkpoint " + path + ": not resumable (no training state in its metadata): resume from a <run>/checkpoint-<step>.safetensors "
             "written by --save-every, or start from its weights with --load");
    std::map<std::string, std::string> saved;
    try {
        nlohmann::json j = nlohmann::json::parse(ci.metadata.at("flags"));
        for (auto it = j.begin(); it != j.end(); ++it) saved[it.key()] = it.value().get<std::string>();
    } catch (const nlohmann::json::exception& e) {
        fail("checkpoint " + path + ": its 'flags' metadata is not a JSON object of strings");
    }
    for (const char* f : {"--load", "--dump-npy", "--preset", "--resume"}) saved.erase(f);  // this run's, not the saved run's
    if (!cli.given("--out")) {
        const size_t slash = path.find_last_of('/');
        saved["--out"] = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    }
    cli.inherit(saved, kResumeMayChange, path);
    int64_t done = 0;
    try {
        done = nlohmann::json::parse(ci.metadata.at("train_state")).at("step").get<int64_t>();
    } catch (const nlohmann::json::exception& e) {
        fail("checkpoint " + path + ": malformed training state (" + e.what() + ")");
    }
    if (cli.has_value("--dump-npy") && cli.get_int("--dump-step", 1) <= done)
        fail_usage(strfmt("--dump-step %s: the run resumes at step %lld; dump a later step", cli.get("--dump-step").c_str(), (long long)done + 1));
    if (cli.get_int("--steps", 1) <= done)
        fail_usage(strfmt("--steps %s: the checkpoint %s is already at step %lld", cli.get("--steps").c_str(), path.c_str(), (long long)done));
}

TrainOptions train_options(const Cli& cli, const std::string& binary, const std::string& run_dir, int64_t tokens_per_step, int steps) {
    TrainOptions o;
    o.steps = steps;
    o.binary = binary;
    o.lr = cli.get_double("--lr", 0, 10);
    o.warmup = (int)cli.get_int("--warmup", 0, 1 << 30);
    o.min_lr_frac = cli.get_double("--min-lr-frac", 0, 1);
    o.adam = adamw_from_cli(cli);
    o.adam.weight_decay = (float)cli.get_double("--weight-decay", 0, 10);
    o.adam.grad_clip = (float)cli.get_double("--grad-clip", 0, 1e30);
    o.eval_every = (int)cli.get_int("--eval-every", 0, 1 << 30);
    o.save_every = (int)cli.get_int("--save-every", 0, 1 << 30);
    o.grad_accum = grad_accum_from_cli(cli);
    o.run_dir = run_dir;
    make_dirs(o.run_dir);
    o.save_path = cli.has_value("--save") ? cli.get("--save") : o.run_dir + "/model.safetensors";
    check_writable(o.save_path);  // before the run, not after it (a directory, a special file, no permission)
    o.dump_dir = cli.get("--dump-npy");
    o.dump_step = (int)cli.get_int("--dump-step", 1, 1 << 30) - 1;
    if (!o.dump_dir.empty() && o.dump_step >= steps)
        fail_usage(strfmt("--dump-step %d: the run has only %d steps", o.dump_step + 1, steps));
    o.tokens_per_step = tokens_per_step * o.grad_accum;
    o.flags = cli.values();
    o.resume_path = cli.has_flag("--resume") ? cli.get("--resume") : "";
    return o;
}

std::map<std::string, std::string> train_state_metadata(const TrainOptions& o, const RandomState& rs, int steps_done, double loss) {
    nlohmann::json streams = nlohmann::json::object(), counters = nlohmann::json::object();
    for (auto& s : rs.streams) streams[s.first] = s.second->state();
    for (auto& c : rs.counters) counters[c.first] = std::to_string(*c.second);  // as text: JSON numbers lose bits above 2^53
    // micro_batches: the micro-batches of one step over every process (processes × --grad-accum): the global batch
    nlohmann::json st = {{"binary", o.binary}, {"step", steps_done}, {"steps", o.steps}, {"streams", streams}, {"counters", counters},
                         {"micro_batches", comm().size * std::max(1, o.grad_accum)}, {"processes", comm().size}};
    return {{"step", std::to_string(steps_done)}, {"loss", strfmt("%.9g", loss)}, {"train_state", st.dump()},
            {"flags", nlohmann::json(o.flags).dump()}};
}

int restore_train_state(const TrainOptions& o, const RandomState& rs) {
    const std::string& path = o.resume_path;
    CheckpointInfo ci = read_checkpoint_metadata(path);
    auto it = ci.metadata.find("train_state");
    if (it == ci.metadata.end()) fail("checkpoint " + path + ": not resumable (no training state in its metadata)");
    int step = 0;
    try {
        nlohmann::json st = nlohmann::json::parse(it->second);
        const std::string binary = st.at("binary").get<std::string>();
        if (binary != o.binary) fail("checkpoint " + path + ": written by " + binary + ", it resumes there, not in " + o.binary);
        step = config_int(st, "step", "training state", 1, 1 << 30);
        const nlohmann::json &streams = st.at("streams"), &counters = st.at("counters");
        if (streams.size() != rs.streams.size() || counters.size() != rs.counters.size())
            fail("checkpoint " + path + ": its training state has other random streams than this run's");
        for (auto& s : rs.streams)
            if (!streams.contains(s.first) || !s.second->set_state(streams.at(s.first).get<std::string>()))
                fail("checkpoint " + path + ": the training state has no valid '" + s.first + "' random stream");
        for (auto& c : rs.counters) {
            const std::string v = counters.contains(c.first) ? counters.at(c.first).get<std::string>() : "";
            char* end = nullptr;
            const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
            if (v.empty() || *end || v[0] == '-') fail("checkpoint " + path + ": the training state has no valid '" + c.first + "' counter");
            *c.second = x;
        }
        // the global batch must stay the same (older checkpoints, without the field, were one process × their --grad-accum)
        const int here = comm().size * std::max(1, o.grad_accum);
        int64_t mb = 0, np = 1;
        if (st.contains("micro_batches")) {
            mb = st.at("micro_batches").get<int64_t>();
            np = st.value("processes", (int64_t)1);
        } else if (ci.metadata.count("flags")) {  // before the field: one process × its --grad-accum
            const nlohmann::json fl = nlohmann::json::parse(ci.metadata.at("flags"));
            mb = fl.contains("--grad-accum") ? std::atoll(fl.at("--grad-accum").get<std::string>().c_str()) : 1;
        }
        if (mb > 0 && mb != here) {
            fail_usage(strfmt("--grad-accum %d: the checkpoint's steps were %lld process%s × %lld micro-batch%s = %lld per step; here %d × %d = %d "
                              "(keep processes × --grad-accum at %lld: the same global batch)",
                              std::max(1, o.grad_accum), (long long)np, np == 1 ? "" : "es", (long long)(mb / np), mb / np == 1 ? "" : "es",
                              (long long)mb, comm().size, std::max(1, o.grad_accum), here, (long long)mb));
        }
        if (st.at("steps").get<int64_t>() != o.steps)
            std::fprintf(stderr, "note: the checkpoint's run had --steps %lld, this one %d: the cosine schedule follows the new length\n",
                         (long long)st.at("steps").get<int64_t>(), o.steps);
    } catch (const nlohmann::json::exception& e) {
        fail("checkpoint " + path + ": malformed training state (" + e.what() + ")");
    }
    if (step >= o.steps) fail_usage(strfmt("--steps %d: the checkpoint %s is already at step %d", o.steps, path.c_str(), step));
    return step;
}

std::vector<std::map<std::string, double>> earlier_log_rows(const std::string& path, const std::vector<std::string>& cols, int steps_done) {
    std::vector<std::map<std::string, double>> rows;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) return rows;
    CsvTable t;
    try {
        t = read_csv(path);
    } catch (const Error& e) {
        std::fprintf(stderr, "note: %s is not readable as a log (%s); the new log starts at the resumed step\n", path.c_str(), e.what());
        return rows;
    }
    if (t.header != cols) {
        std::fprintf(stderr, "note: %s has other columns; the new log starts at the resumed step\n", path.c_str());
        return rows;
    }
    for (size_t i = 0; i < t.rows(); i++) {
        if (!(t.cols[0][i] >= 1 && t.cols[0][i] <= steps_done)) continue;
        std::map<std::string, double> r;
        for (size_t c = 0; c < cols.size(); c++) r[cols[c]] = t.cols[c][i];
        rows.push_back(r);
    }
    return rows;
}

nlohmann::json run_summary(const std::string& binary, const Cli& cli, const Task& task, const nlohmann::json& model,
                           int64_t params, int threads, Device dev, const TrainOptions& o, const TrainResult& r) {
    nlohmann::json s = {{"binary", binary}, {"task", task.kind}, {"model", model}, {"params", params},
                        {"flags", cli_json(cli.values())}, {"threads", threads}, {"device", device_name(dev)},
                        {"steps", r.steps_done}, {"final_train_loss", r.last_loss}, {"ms_per_step", r.ms_per_step},
                        {"tokens_per_s", r.tokens_per_s}, {"checkpoint", o.save_path}, {"processes", comm().size},
                        {"micro_batches_per_step", comm().size * std::max(1, o.grad_accum)}};
    for (auto& kv : r.last_eval) s["final_" + kv.first] = kv.second;
    s["provenance"] = provenance_json();
    return s;
}

std::string final_line(const TrainResult& r) {
    std::string s = strfmt("final: train loss %.4f", r.last_loss);
    for (auto& kv : r.last_eval) s += strfmt("  %s %.4f", kv.first.c_str(), kv.second);
    return s;
}

}  // namespace icl
