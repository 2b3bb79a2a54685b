// cli.cpp — see cli.h.
#include "engine/cli.h"

#include <omp.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <set>
#include <new>
#include <sstream>

#include <unistd.h>

#include "engine/comm.h"
#include "engine/common.h"
#include "engine/provenance.h"

namespace icl {

Cli::Cli(std::string program, std::string summary) : program_(std::move(program)), summary_(std::move(summary)) {}

void Cli::flag(const std::string& name, const std::string& def, const std::string& help) {
    ICL_ASSERT_MSG(name.rfind("--", 0) == 0, name);
    for (auto& f : flags_) ICL_ASSERT_MSG(f.name != name, "flag registered twice: " + name);
    flags_.push_back({name, def, help, false});
}

void Cli::flag_shared(const std::string& name, const std::string& def, const std::string& help) {
    if (!has_flag(name)) flag(name, def, help);
}

bool Cli::has_flag(const std::string& name) const {
    for (auto& f : flags_)
        if (f.name == name) return true;
    return false;
}

void Cli::flag_switch(const std::string& name, const std::string& help) {
    flag(name, "0", help);
    flags_.back().is_switch = true;
}

void Cli::set_default(const std::string& name, const std::string& def) {
    for (auto& f : flags_)
        if (f.name == name) { f.def = def; return; }
    ICL_ASSERT_MSG(false, "set_default of unknown flag " + name);
}

void Cli::preset(const std::string& name, const std::string& help,
                 std::vector<std::pair<std::string, std::string>> values) {
    for (auto& kv : values) (void)find(kv.first);  // presets only name registered flags
    presets_.push_back({name, help, std::move(values)});
}

void Cli::positionals(const std::string& usage, int min_count, int max_count) {
    usage_ = usage;
    pos_min_ = min_count;
    pos_max_ = max_count;
}

void Cli::epilog(const std::string& text) { epilog_ = text; }

const Cli::Flag& Cli::find(const std::string& name) const {
    for (auto& f : flags_)
        if (f.name == name) return f;
    ICL_ASSERT_MSG(false, "unknown flag queried: " + name);
    std::abort();
}

bool Cli::parse(int argc, char** argv) {
    std::vector<std::string> a;
    for (int i = 1; i < argc; i++) a.emplace_back(argv[i]);
    return parse(a);
}

bool Cli::parse(const std::vector<std::string>& args) {
    given_.clear();
    positional_.clear();
    for (size_t i = 0; i < args.size(); i++) {
        std::string a = args[i];
        if (a == "--help" || a == "-h") {
            std::fputs(help_text().c_str(), stdout);
            return false;
        }
        if (a.rfind("--", 0) != 0 || a == "--") {
            if (a.size() > 1 && a[0] == '-' && !(a.size() > 1 && (std::isdigit((unsigned char)a[1]) || a[1] == '.')))
                fail_usage("unknown option " + quote_text(a) + " (see --help)");
            positional_.push_back(a);
            continue;
        }
        std::string name = a, value;
        bool has_eq = false;
        auto eq = a.find('=');
        if (eq != std::string::npos) { name = a.substr(0, eq); value = a.substr(eq + 1); has_eq = true; }
        const Flag* f = nullptr;
        for (auto& g : flags_)
            if (g.name == name) f = &g;
        if (name == "--preset" && !presets_.empty()) {
            if (!has_eq) {
                if (i + 1 >= args.size()) fail_usage("--preset needs a value (one of the presets in --help)");
                value = args[++i];
            }
            given_["--preset"] = value;
            continue;
        }
        if (!f) {
            for (auto& r : renamed_)
                if (r.first == name) fail_usage(name + ": renamed " + r.second + " (the same value, the spelling every binary now uses)");
            fail_usage("unknown flag " + quote_text(name) + " (see --help)");
        }
        if (f->is_switch) {
            if (has_eq) {
                if (value == "1" || value == "true" || value == "yes") value = "1";
                else if (value == "0" || value == "false" || value == "no") value = "0";
                else fail_usage(name + ": expected no value, or =1/=0, got " + quote_text(value));
            } else value = "1";
        } else if (!has_eq) {
            if (i + 1 >= args.size()) fail_usage(name + " needs a value");
            value = args[++i];
        }
        if (given_.count(name)) fail_usage(name + " given twice");  // a registered flag's name
        given_[name] = value;
    }
    if (given_.count("--preset")) {
        preset_ = given_["--preset"];
        const Preset* p = nullptr;
        for (auto& q : presets_)
            if (q.name == preset_) p = &q;
        if (!p) {
            std::string names;
            for (auto& q : presets_) names += (names.empty() ? "" : ", ") + q.name;
            fail_usage("--preset: unknown preset " + quote_text(preset_) + " (choose from: " + names + ")");
        }
        from_preset_.clear();
        for (auto& kv : p->values) from_preset_[kv.first] = kv.second;
    }
    if ((int)positional_.size() < pos_min_ || (int)positional_.size() > pos_max_) {
        if (pos_max_ == 0) fail_usage("unexpected argument " + quote_text(positional_[0]) + " (see --help)");
        fail_usage("expected " + usage_ + " (see --help)");
    }
    return true;
}

std::string Cli::get(const std::string& name) const {
    if (name == "--preset") return preset_;
    const Flag& f = find(name);
    auto it = given_.find(name);
    if (it != given_.end()) return it->second;
    auto kt = inherited_.find(name);
    if (kt != inherited_.end()) return kt->second;
    auto jt = from_preset_.find(name);
    if (jt != from_preset_.end()) return jt->second;
    return f.def;
}

void Cli::inherit(const std::map<std::string, std::string>& saved, const std::vector<std::string>& may_change, const std::string& source) {
    if (!preset_.empty()) fail_usage("--preset: not with --resume (the run's flags come from " + source + ")");
    for (const Flag& f : flags_) {
        auto it = saved.find(f.name);
        if (it == saved.end()) continue;  // a flag this build has and the saved run's did not: its default
        auto g = given_.find(f.name);
        if (g == given_.end()) {
            inherited_[f.name] = it->second;
            continue;
        }
        if (g->second == it->second || std::find(may_change.begin(), may_change.end(), f.name) != may_change.end()) continue;
        std::string may;
        for (auto& m : may_change) may += (may.empty() ? "" : " ") + m;
        fail_usage(f.name + " " + quote_text(g->second) + ": the run in " + source + " used " + quote_text(it->second) +
                   "; a resumed run keeps its configuration (only " + may + " may change)");
    }
}

bool Cli::given(const std::string& name) const { return given_.count(name) != 0; }
bool Cli::has_value(const std::string& name) const { return !get(name).empty(); }

bool Cli::get_bool(const std::string& name) const {
    std::string v = get(name);
    if (v == "1" || v == "true" || v == "yes") return true;
    if (v == "0" || v == "false" || v == "no" || v.empty()) return false;
    fail_usage(name + ": expected 0 or 1, got " + quote_text(v));
}

int64_t Cli::get_int(const std::string& name, int64_t min, int64_t max) const {
    std::string v = get(name);
    if (v.empty()) fail_usage(name + " needs a value");
    char* end = nullptr;
    errno = 0;
    double d = std::strtod(v.c_str(), &end);  // accept 1e4 style integers (not hexadecimal ones)
    if (end == v.c_str() || *end != '\0' || errno == ERANGE || !std::isfinite(d) || d != std::floor(d) ||
        std::fabs(d) > 9e15 || v.find_first_of("xX") != std::string::npos)
        fail_usage(name + ": expected an integer, got " + quote_text(v));
    int64_t x = (int64_t)d;
    if (x < min || x > max) {
        if (max == INT32_MAX) fail_usage(strfmt("%s: must be in [%lld, %d] (the largest count a flag takes), got %s", name.c_str(), (long long)min,
                                                INT32_MAX, v.c_str()));
        if (max == INT64_MAX) fail_usage(strfmt("%s: must be >= %lld, got %s", name.c_str(), (long long)min, v.c_str()));
        fail_usage(strfmt("%s: must be in [%lld, %lld], got %s", name.c_str(), (long long)min, (long long)max, v.c_str()));
    }
    return x;
}

double Cli::get_double(const std::string& name, double min, double max) const {
    std::string v = get(name);
    if (v.empty()) fail_usage(name + " needs a value");
    char* end = nullptr;
    errno = 0;
    double d = std::strtod(v.c_str(), &end);
    if (end == v.c_str() || *end != '\0' || errno == ERANGE || !std::isfinite(d))
        fail_usage(name + ": expected a number, got " + quote_text(v));
    if (d < min || d > max) fail_usage(strfmt("%s: must be in [%g, %g], got %s", name.c_str(), min, max, v.c_str()));
    return d;
}

uint64_t Cli::get_seed() const { return (uint64_t)get_int("--seed", 0, (int64_t)9e15); }

std::string Cli::get_choice(const std::string& name, const std::vector<std::string>& choices) const {
    std::string v = get(name), all;
    for (auto& c : choices) {
        if (v == c) return v;
        all += (all.empty() ? "" : ", ") + c;
    }
    fail_usage(name + ": expected one of " + all + ", got " + quote_text(v));
}

std::vector<int64_t> Cli::get_int_list(const std::string& name, int64_t min, int64_t max) const {
    std::vector<int64_t> out;
    for (const std::string& item : get_list(name)) {
        char* end = nullptr;
        errno = 0;
        const long long x = std::strtoll(item.c_str(), &end, 10);
        if (*end != '\0' || errno == ERANGE) fail_usage(name + ": expected comma-separated integers, got '" + get(name) + "'");
        if (x < min || x > max) fail_usage(strfmt("%s: value %lld out of range [%lld, %lld]", name.c_str(), x, (long long)min, (long long)max));
        out.push_back(x);
    }
    return out;
}

void Cli::renamed(const std::string& old_name, const std::string& new_name) { renamed_.emplace_back(old_name, new_name); }

std::vector<std::string> Cli::get_list(const std::string& name) const {
    std::vector<std::string> out;
    const std::string v = get(name);
    size_t a = 0;
    while (a <= v.size() && !v.empty()) {
        size_t b = v.find(',', a);
        if (b == std::string::npos) b = v.size();
        std::string item = v.substr(a, b - a);
        if (item.empty()) fail_usage(name + ": empty item in the comma list '" + v + "'");
        out.push_back(item);
        a = b + 1;
    }
    return out;
}

std::vector<double> Cli::get_double_list(const std::string& name, double min, double max) const {
    std::vector<double> out;
    for (const std::string& item : get_list(name)) {
        char* end = nullptr;
        errno = 0;
        const double d = std::strtod(item.c_str(), &end);
        if (end == item.c_str() || *end != '\0' || errno == ERANGE || !std::isfinite(d))
            fail_usage(name + ": expected comma-separated numbers, got '" + get(name) + "'");
        if (d < min || d > max) fail_usage(strfmt("%s: value %s out of range [%g, %g]", name.c_str(), item.c_str(), min, max));
        out.push_back(d);
    }
    return out;
}

std::string Cli::help_text() const {
    std::string s = "usage: " + program_ + (usage_.empty() ? "" : " " + usage_) + " [flags]\n" + summary_ + "\n\nflags:\n";
    size_t w = 0;
    for (auto& f : flags_) w = std::max(w, f.name.size() + (f.is_switch ? 0 : 4));
    for (auto& f : flags_) {
        std::string left = f.name + (f.is_switch ? "" : " VAL");
        s += "  " + left + std::string(w + 2 - left.size(), ' ') + f.help;
        if (!f.is_switch && f.help.find("default") == std::string::npos)
            s += " (default: " + (f.def.empty() ? std::string("none") : f.def) + ")";
        s += "\n";
    }
    s += "  --help" + std::string(w - 4, ' ') + "print this help and exit\n";
    if (!presets_.empty()) {
        s += "\npresets (--preset NAME sets these flags; flags given on the command line win):\n";
        for (auto& p : presets_) {
            s += "  " + p.name + ": " + p.help + "\n     ";
            for (auto& kv : p.values) s += " " + kv.first + " " + kv.second;
            s += "\n";
        }
    }
    if (!epilog_.empty()) s += "\n" + epilog_ + "\n";
    return s;
}

std::map<std::string, std::string> Cli::values() const {
    std::map<std::string, std::string> m;
    for (auto& f : flags_) m[f.name] = get(f.name);
    if (!preset_.empty()) m["--preset"] = preset_;
    return m;
}

void add_common_flags(Cli& cli, const CommonDefaults& d) {
    cli.flag("--device", "cpu", "cpu | cuda");
    cli.flag_switch("--tf32", "cuda: let the matmuls use TF32 tensor cores (faster, ~1e-3 relative error; default: full fp32)");
    cli.flag("--threads", "0", "CPU threads (0 = OpenMP default, i.e. all cores)");
    cli.flag("--seed", d.seed, "random seed (data and init; same seed + threads => identical CPU results)");
    cli.flag("--steps", d.steps, "training steps");
    cli.flag("--batch", d.batch, "sequences per step");
    cli.flag("--lr", d.lr, "peak learning rate");
    cli.flag("--out", "", "run directory (default: out/<binary>/<preset-or-task>-<time>)");
    cli.flag("--dump-npy", "", "write every parameter, activation and gradient of one step as .npy into DIR");
    cli.flag("--load", "", "initialise from this .safetensors checkpoint (its config is used)");
    cli.flag("--save", "", "write the final model to this .safetensors checkpoint (default: <run>/model.safetensors)");
}

int apply_threads(const Cli& cli) {
    int t = (int)cli.get_int("--threads", 0, 1024);
    if (t > 0) omp_set_num_threads(t);
    return omp_get_max_threads();
}

// The flags the running subcommand does not use (refuse_unused_flags fills it): their defaults describe no part of
// this run, so the run record leaves them out (e.g. `duallens check` does not record experiment's --seeds 3).
static std::set<std::string>& unused_by_subcommand() {
    static std::set<std::string> s;
    return s;
}

std::vector<std::vector<std::string>> per_seed_args(const std::vector<std::string>& args, uint64_t seed0, int n, const std::string& dir) {
    std::vector<std::string> base;  // the command line without --seed, --seeds and --out
    for (size_t i = 0; i < args.size(); i++) {
        bool drop = false;
        for (const char* f : {"--seed", "--seeds", "--out"}) {
            if (args[i] == f) { drop = true; i++; }                              // "--flag value"
            else if (args[i].rfind(std::string(f) + "=", 0) == 0) drop = true;  // "--flag=value"
        }
        if (!drop) base.push_back(args[i]);
    }
    std::vector<std::vector<std::string>> out;
    for (int k = 0; k < n; k++) {
        out.push_back(base);
        out.back().insert(out.back().end(), {"--seed", std::to_string(seed0 + (uint64_t)k), "--out", dir + "/seed" + std::to_string(k + 1)});
    }
    return out;
}

RunEnv apply_run_flags(const Cli& cli) {
    RunEnv e;
    e.threads = apply_threads(cli);
    e.dev = parse_device(cli.get("--device"));
    check_device_environment();
    require_device(e.dev);
    if (cli.has_flag("--tf32")) set_tf32(cli.get_bool("--tf32"));
    RunRecord r;  // for every summary.json / CSV / table.md this run writes (engine/provenance.h)
    r.threads = e.threads;
    r.dev = e.dev;
    if (cli.has_flag("--seed") && !unused_by_subcommand().count("--seed")) r.seed = cli.get_seed();
    if (cli.has_flag("--seeds") && !unused_by_subcommand().count("--seeds")) r.seeds = (int)cli.get_int("--seeds", 1, 1000);
    set_run_record(r);
    return e;
}

// One error line. With several processes (engine/comm.h) it names the rank and stops every rank: a rank other than 0
// waits a moment first, so that an error every rank meets (a NaN loss, reduced across ranks) is printed once, by 0.
static int report_error(const std::string& msg, int code) {
    std::fflush(stdout);
    const Comm& c = comm();
    if (c.size > 1) {
        if (c.rank != 0) usleep(2000000);
        const std::string line = strfmt("error (rank %d of %d): %s\n", c.rank, c.size, msg.c_str());
        if (write(comm_error_fd(), line.data(), line.size()) < 0) {
        }
        comm_abort(code);
    }
    std::fprintf(stderr, "error: %s\n", msg.c_str());
    return code;
}

// OpenMP threads waiting at a barrier spin by default (libgomp: GOMP_SPINCOUNT = 300,000 turns, ~3 ms, before they
// sleep), and on a machine shared with another busy process that costs far more than the cores it takes. Waiting
// passively (no spin) is the fairest there but pays a futex wake-up at every barrier of a step made of many small
// operations. A short spin keeps most of both: the CGT step of `make run`'s shape (`bench cgt --seq 73 --batch 32
// --layers 4 --width 64 --heads 4 --reps 5`, 2 threads, 2-core Intel Xeon, 2026-12-07) took 149–158 ms passive, 126–135
// spinning and 130–139 with 1,000 turns on the idle machine (most runs); beside one busy process 242–269 passive,
// 365–437 spinning and 260–265 with 1,000 turns (docs/benchmarks.md, every run). libgomp reads its settings once, before main, so a
// binary started with neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT sets OMP_WAIT_POLICY=passive and GOMP_SPINCOUNT=1000
// (libgomp takes the spin count over the policy; other OpenMP runtimes read the policy) and executes itself again:
// the same process, arguments and environment otherwise. A policy or spin count the user gives is kept. Not done
// when a thread binding is asked for (OMP_PROC_BIND, OMP_PLACES, GOMP_CPU_AFFINITY: libgomp has already pinned this
// thread before main, and the narrowed CPU mask would survive the exec), under valgrind (it would not follow the
// exec), or with ICL_NO_REEXEC set.
static void prefer_short_waiting(char** argv) {
#ifdef __linux__
    for (const char* v : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "ICL_NO_REEXEC"})
        if (std::getenv(v)) return;
    const char* preload = std::getenv("LD_PRELOAD");
    if (preload && std::strstr(preload, "vgpreload")) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0 || setenv("GOMP_SPINCOUNT", "1000", 1) != 0) {
        unsetenv("OMP_WAIT_POLICY");
        return;
    }
    execv("/proc/self/exe", argv);   // returns only if it failed: go on with the default policy,
    unsetenv("OMP_WAIT_POLICY");     // and leave the children theirs
    unsetenv("GOMP_SPINCOUNT");
#else
    (void)argv;
#endif
}

int cli_main(int argc, char** argv, int (*run)(int, char**)) {
    int code = 0;
    prefer_short_waiting(argv);
    try {
        comm_init(&argc, &argv);
        code = run(argc, argv);
    } catch (const Error& e) {
        return report_error(e.what(), e.exit_code);
    } catch (const std::bad_alloc&) {
        return report_error("out of memory (reduce --batch, --seq or the model size)", 1);
    } catch (const std::exception& e) {
        return report_error(e.what(), 1);
    }
    if (code != 0 && comm().size > 1) comm_abort(code);
    comm_finalize();
    return code;
}

static std::string subcommand_list(const std::vector<Subcommand>& table) {
    std::string names;
    for (const Subcommand& c : table) names += (names.empty() ? "" : " | ") + c.name;
    return names;
}

void add_subcommands(Cli& cli, const std::vector<Subcommand>& table) {
    cli.positionals("SUBCOMMAND (" + subcommand_list(table) + ")", 1, 1);
}

void refuse_unused_flags(const Cli& cli, const std::string& sub, const FlagUsers& users, const std::string& label) {
    for (auto& f : users) {
        const bool used = std::find(f.second.begin(), f.second.end(), sub) != f.second.end();
        if (!used) unused_by_subcommand().insert(f.first);
        if (!cli.given(f.first) || used) continue;
        std::string subs;
        for (auto& x : f.second) subs += (subs.empty() ? "" : ", ") + x;
        fail_usage(f.first + ": " + (label.empty() ? cli.program() + " " + sub : label) + " does not use it" +
                   (subs.empty() ? "" : " (only " + subs + ")"));
    }
}

int run_subcommand(const Cli& cli, const std::vector<Subcommand>& table) {
    const std::string& sub = cli.args().at(0);
    for (const Subcommand& c : table)
        if (c.name == sub) return c.run(cli);
    fail_usage("unknown subcommand '" + sub + "' (" + subcommand_list(table) + ")");
}

}  // namespace icl
