// sweep — a grid of flag values × seeds through any icl.cpp binary: every run in its own folder, one table
// (mean ± 95% interval over the seeds) and one plot per metric, resumable (a finished run is never rerun).
//
//   sweep --grid '--ell=1,2,3' --metric spec=/runs/0/eval/spec_acc --seeds 3 --out out/sweep/ell -- train_cgt --preset icl-mini --compare aux-reg
//   sweep --preset cgt-ell                     # a named sweep (the CGT ablation figures; --list shows them)
//   sweep --preset cgt-ell --paper --seeds 6   # the same figure at the paper's size (a GPU job)
//   sweep --preset cgt-ell -- --steps 300      # flags after "--" go into a named sweep's command (replacing its own value)
//
// Cells are the combinations of the --grid values ('FLAG=v1,v2,…', several separated by ';'; the first flag is
// the plots' x axis, the others make one line each). Cell c and seed k (k = 0 … --seeds−1) run
//     BINARY ARGS… FLAG=v … --seed (--seed + k) --out OUT/<cell>/seed<k+1>
// with the run's output in OUT/<cell>/seed<k+1>.log. A run is finished when its folder's summary.json (written last,
// atomically, by every binary) holds every metric; a rerun of the same sweep skips finished runs, so an interrupted
// sweep continues where it stopped. A metric is NAME=JSON-POINTER into that summary.json (RFC 6901, e.g.
// /runs/0/eval/spec_acc). OUT gets table.md, results.csv (one row per run), summary.json and <metric>.png.
// BINARY without a '/' is looked up beside this program (build/). Exit codes: 0 ok, 2 bad flags, 1 a run failed
// (its log's last lines are printed; the finished runs stay) or a metric is missing from a run's summary.
#include <fcntl.h>
#include <cerrno>
#include <cctype>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/cli.h"
#include "engine/common.h"
#include "engine/fileio.h"
#include "engine/provenance.h"
#include "engine/run.h"
#include "report/analysis.h"
#include "report/plot.h"

using namespace icl;

namespace {

// ---- the named sweeps ---------------------------------------------------------------------------------------
// CPU-sized: ICL-mini (spec/cgt.md §4.1 at 1 digit, 2 tasks × 4 examples, L = 4) or LR-mini, 1 thread per run; the
// paper-sized twin (--paper) uses the paper's model (icl-table1 / paper-linreg presets) on the GPU.
struct Named {
    std::string name, figure, grid, metrics;
    std::vector<std::string> cpu, paper;  // BINARY ARGS… of each size
    std::string paper_grid = "";          // the paper-sized grid where it differs (the paper's L = 6 or 8 blocks)
};

const char* kIclMetrics = "spec_ctx=/runs/0/eval/ctx_acc,spec=/runs/0/eval/spec_acc,base=/runs/0/eval/base_acc";
// LR-mini freezes after 3, 5, 8 samples: the error at the query after 10 and 15 samples, frozen after 5 / 8 and dynamic
const char* kLrMetrics = "frozen5_k10=/runs/0/eval/frozen/5/10,frozen8_k15=/runs/0/eval/frozen/8/15,dynamic_k10=/runs/0/eval/dynamic/10";

// train_cgt on a preset, one seed per run (the sweep runs the seeds), the Aux + Reg variant unless on the grid
std::vector<std::string> cgt(const char* preset, bool paper, std::vector<std::string> extra = {}, bool compare = true) {
    std::vector<std::string> a = {"train_cgt", "--preset", preset, "--seeds", "1"};
    if (compare) a.insert(a.end(), {"--compare", "aux-reg"});
    const std::vector<std::string> where = paper ? std::vector<std::string>{"--device", "cuda"} : std::vector<std::string>{"--threads", "1"};
    a.insert(a.end(), where.begin(), where.end());
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
}
std::vector<std::string> icl_cpu(std::vector<std::string> extra = {}, bool compare = true) { return cgt("icl-mini", false, extra, compare); }
std::vector<std::string> icl_paper(std::vector<std::string> extra = {}, bool compare = true) { return cgt("icl-table1", true, extra, compare); }

const std::vector<Named>& named_sweeps() {
    static const std::vector<Named> k = {
        // Fig. 7a and Fig. 9 are one sweep: Fig. 9 plots the same runs' accuracy with the examples kept in context
        // (spec_ctx) beside the frozen-y accuracy without them (spec), at the paper's ℓ = 3, 4, 5 (inside this grid)
        {"cgt-ell", "Fig. 7a / 9: the layer ℓ where y starts, frozen y with and without the examples in context (paper: best ℓ = 4 of 6)",
         "--ell=1,2,3", kIclMetrics, icl_cpu(), icl_paper(), "--ell=2,3,4,5"},
        {"cgt-rank", "App. B.2.1: generator rank r (paper: rank 2 and 4 beat rank 1)", "--rank=1,2,4", kIclMetrics, icl_cpu(), icl_paper()},
        {"cgt-templates", "App. B.2.1: templates M", "--templates=2,4,8", kIclMetrics, icl_cpu(), icl_paper()},
        {"cgt-wcwd", "Fig. 8: regularizer weights w_C × w_D (paper: w_C above 0.04 hurts; larger w_D does not)",
         "--wc=0,0.02,0.04,0.08;--wd=0,0.02,0.08", kIclMetrics, icl_cpu(), icl_paper()},
        {"cgt-single-task", "App. D.1: one task, 8 examples: baseline vs frozen-y CGT (paper: 82.7% vs 82.6–82.8%)", "--compare=baseline,aux-reg",
         "base=/runs/0/eval/base_acc,spec_ctx=/runs/0/eval/ctx_acc", icl_cpu({"--n-tasks", "1", "--n-ex", "8"}, false),
         icl_paper({"--n-tasks", "1", "--n-ex", "8"}, false)},
        {"cgt-lr-ell", "Fig. 11: linear regression, ℓ (paper: frozen after 20 needs ℓ = L−1)", "--ell=1,2,3", kLrMetrics, cgt("lr-mini", false),
         cgt("paper-linreg", true), "--ell=3,4,5,6,7"},
        {"cgt-lr-dims", "Fig. 12: linear regression, d_x with d_y = 64 (paper: d_x ∈ {64, 128}, 3 runs each)", "--width=64,128", kLrMetrics,
         cgt("lr-mini", false, {"--dy", "64"}), cgt("paper-linreg", true, {"--dy", "64"})},
        // Fig. 15's stand-in: text-mini on the fortune corpus (its default --data out/fortunes, prep_fortunes' default;
        // `-- --data DIR` for another), trained on single texts (--two-texts 0) or on mixtures (0.5, text-mini's), the
        // document embeddings' 5-NN category accuracy in y space and in the t-SNE plane. No paper-sized twin: the paper
        // trains on C4 and embeds Wikipedia pages, neither of which is on these machines.
        {"cgt-two-texts", "Fig. 15 stand-in: trained on single texts vs mixtures, 5-NN category accuracy of document y (paper: single texts separate much better)",
         "--two-texts=0,0.5", "knn_y=/runs/0/eval/knn_y,knn_tsne=/runs/0/eval/knn_tsne",
         cgt("text-mini", false, {"--steps", "1200"}), {}},
    };
    return k;
}

// ---- the grid ---------------------------------------------------------------------------------------------

struct Axis {
    std::string flag;
    std::vector<std::string> values;
};

std::vector<Axis> parse_grid(const std::string& text) {
    std::vector<Axis> axes;
    size_t a = 0;
    while (a <= text.size()) {
        size_t b = text.find(';', a);
        const std::string part = text.substr(a, b == std::string::npos ? std::string::npos : b - a);
        a = b == std::string::npos ? text.size() + 1 : b + 1;
        const size_t eq = part.find('=');
        if (part.rfind("--", 0) != 0 || eq == std::string::npos || eq + 1 >= part.size())
            fail_usage("--grid: expected '--flag=v1,v2,…' (several separated by ';'), got " + quote_text(part));
        Axis ax;
        ax.flag = part.substr(0, eq);
        size_t c = eq + 1;
        for (;;) {
            size_t d = part.find(',', c);
            const std::string v = part.substr(c, d == std::string::npos ? std::string::npos : d - c);
            if (v.empty()) fail_usage("--grid: an empty value in " + quote_text(part));
            ax.values.push_back(v);
            if (d == std::string::npos) break;
            c = d + 1;
        }
        for (const Axis& o : axes)
            if (o.flag == ax.flag) fail_usage("--grid: " + ax.flag + " given twice");
        axes.push_back(ax);
    }
    return axes;
}

struct Metric {
    std::string name;
    nlohmann::json::json_pointer ptr;
};

std::vector<Metric> parse_metrics(const std::vector<std::string>& items) {
    std::vector<Metric> out;
    for (const std::string& it : items) {
        const size_t eq = it.find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 >= it.size() || it[eq + 1] != '/')
            fail_usage("--metric: expected NAME=/json/pointer, got " + quote_text(it));
        const std::string name = it.substr(0, eq);
        if (name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != std::string::npos)
            fail_usage("--metric: the name " + quote_text(name) + " may hold only letters, digits, '_' and '-' (it names a file)");
        try {
            out.push_back({name, nlohmann::json::json_pointer(it.substr(eq + 1))});
        } catch (const nlohmann::json::exception&) {
            fail_usage("--metric: " + quote_text(it.substr(eq + 1)) + " is not a JSON pointer");
        }
    }
    if (out.empty()) fail_usage("--metric: give at least one NAME=/json/pointer");
    return out;
}

// A cell's folder name: "ell-2_wc-0.04" (characters outside [A-Za-z0-9.+-] become '_').
std::string cell_name(const std::vector<Axis>& axes, const std::vector<int>& idx) {
    std::string s;
    for (size_t i = 0; i < axes.size(); i++) {
        if (i) s += "_";
        std::string part = axes[i].flag.substr(2) + "-" + axes[i].values[idx[i]];
        for (char& ch : part)
            if (!(std::isalnum((unsigned char)ch) || ch == '.' || ch == '+' || ch == '-')) ch = '_';
        s += part;
    }
    return s;
}

// ---- running one program ------------------------------------------------------------------------------------

std::string self_dir() {
    char exe[4096];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) fail("sweep: cannot find its own folder (/proc/self/exe) to look up the binary; give a path with a '/'");
    exe[n] = 0;
    const std::string p = exe;
    return p.substr(0, p.rfind('/'));
}

// Runs argv (stdout and stderr captured); returns the exit status (128 + signal when killed).
int run_program(const std::vector<std::string>& argv, std::string& output) {
    int fd[2];
    if (pipe(fd) != 0) fail("sweep: pipe() failed");
    const pid_t pid = fork();
    if (pid < 0) fail("sweep: fork() failed");
    if (pid == 0) {
        dup2(fd[1], 1);
        dup2(fd[1], 2);
        close(fd[0]);
        close(fd[1]);
        std::vector<char*> a;
        for (const std::string& s : argv) a.push_back(const_cast<char*>(s.c_str()));
        a.push_back(nullptr);
        execv(a[0], a.data());
        std::fprintf(stderr, "sweep: cannot run %s\n", a[0]);
        _exit(127);
    }
    close(fd[1]);
    char buf[65536];
    for (;;) {
        const ssize_t n = read(fd[0], buf, sizeof buf);
        if (n > 0) output.append(buf, (size_t)n);
        else if (n == 0 || errno != EINTR) break;
    }
    close(fd[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

// The metrics of a finished run, or false when its summary is missing or lacks one (not finished).
bool read_metrics(const std::string& run_dir, const std::vector<Metric>& ms, std::vector<double>& vals, nlohmann::json* prov, std::string* missing) {
    const std::string path = run_dir + "/summary.json";
    if (access(path.c_str(), F_OK) != 0) return false;
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(read_file(path, kMaxTextFileBytes, "run summary"));
    } catch (const nlohmann::json::exception&) {
        return false;
    }
    vals.clear();
    for (const Metric& m : ms) {
        if (!j.contains(m.ptr) || !(j.at(m.ptr).is_number() || j.at(m.ptr).is_null())) {
            if (missing) *missing = path + ": no number at " + m.ptr.to_string() + " (metric " + m.name + ")";
            return false;
        }
        vals.push_back(j.at(m.ptr).is_null() ? NAN : j.at(m.ptr).get<double>());
    }
    if (prov && j.contains("provenance")) *prov = j["provenance"];
    return true;
}

std::string last_lines(const std::string& s, int n) {
    size_t at = s.size();
    for (int i = 0; i <= n && at > 0; i++) {
        at = s.rfind('\n', at - 1);
        if (at == std::string::npos) return s;
    }
    return s.substr(at + 1);
}

int run(int argc, char** argv) {
    // everything after "--" is the command
    std::vector<std::string> own, cmd;
    bool after = false;
    for (int i = 1; i < argc; i++) {
        if (!after && std::string(argv[i]) == "--") { after = true; continue; }
        (after ? cmd : own).push_back(argv[i]);
    }
    Cli cli("sweep", "Run a grid of flag values × seeds through an icl.cpp binary; one table and one plot per metric; resumable.");
    cli.flag("--grid", "", "the grid: '--flag=v1,v2,…', several separated by ';' (the first is the plots' x axis)");
    cli.flag("--metric", "", "metrics, comma list of NAME=/json/pointer into each run's summary.json (e.g. spec=/runs/0/eval/spec_acc)");
    cli.flag("--seeds", "3", "runs per cell (seeds --seed, --seed+1, …)");
    cli.flag("--seed", "1", "the first seed");
    cli.flag("--out", "", "the sweep's folder (default: out/sweep/<preset or 'sweep'>-<time>); rerun with the same --out to resume");
    cli.flag_switch("--paper", "with --preset: the paper-sized command (a GPU job) instead of the CPU-sized one");
    cli.flag_switch("--list", "list the named sweeps and exit");
    cli.flag_switch("--dry-run", "print every run's command and whether it is finished; run nothing");
    cli.positionals("--preset NAME | --grid G --metric M -- BINARY [ARGS…]", 0, 0);
    for (const Named& n : named_sweeps()) cli.preset(n.name, n.figure, {{"--grid", n.grid}, {"--metric", n.metrics}});
    cli.epilog(
        "Each cell × seed runs  BINARY ARGS… --flag=v … --seed S --out OUT/<cell>/seed<k>  (its output in seed<k>.log); a run whose\n"
        "summary.json holds every metric is finished and never rerun, so rerunning an interrupted sweep resumes it.\n"
        "OUT gets table.md (mean ± 95% interval, Student t over the seeds), results.csv (one row per run), summary.json and\n"
        "<metric>.png (the metric against the first grid flag, one line per value of the others, 95% bars).\n"
        "examples:\n"
        "  sweep --list\n"
        "  sweep --preset cgt-ell --out out/sweep/cgt-ell             # rerun the same line to resume\n"
        "  sweep --preset cgt-two-texts -- --data DIR --steps 300     # after '--': flags that replace the preset's value or are added\n"
        "  sweep --grid '--wc=0,0.04;--wd=0,0.04' --metric spec=/runs/0/eval/spec_acc -- train_cgt --preset icl-mini --compare aux-reg");
    if (!cli.parse(own)) return 0;
    if (cli.get_bool("--list")) {
        for (const Named& n : named_sweeps()) {
            std::printf("%-16s %s\n  grid %s (paper: %s); metrics %s\n  cpu:   ", n.name.c_str(), n.figure.c_str(), n.grid.c_str(),
                        (n.paper_grid.empty() ? n.grid : n.paper_grid).c_str(), n.metrics.c_str());
            for (auto& a : n.cpu) std::printf("%s ", a.c_str());
            std::printf("\n  paper: ");
            for (auto& a : n.paper) std::printf("%s ", a.c_str());
            if (n.paper.empty()) std::printf("(none: not the paper's data)");
            std::printf("\n");
        }
        return 0;
    }
    std::string grid = cli.get("--grid");
    const std::vector<std::string> metrics = cli.get_list("--metric");
    std::string label = "sweep";
    if (!cli.preset_name().empty()) {  // a named sweep: its grid and metrics (the flags may override them) and its command
        const Named* n = nullptr;
        for (const Named& x : named_sweeps())
            if (x.name == cli.preset_name()) n = &x;
        ICL_ASSERT(n);
        // anything after "--" goes into its command (flags only: --steps 100 for a shorter run)
        if (!cmd.empty() && cmd[0].rfind("--", 0) != 0)
            fail_usage("--preset: it brings its own command; after '--' give only flags to add to it (got " + quote_text(cmd[0]) + ")");
        if (cli.get_bool("--paper") && n->paper.empty())
            fail_usage("--paper: " + n->name + " has no paper-sized version (its data is not the paper's: see --list)");
        const std::vector<std::string> given = cmd;
        cmd = cli.get_bool("--paper") ? n->paper : n->cpu;
        auto preset_has_value = [&](const std::string& flag) {  // the preset's command has "FLAG VALUE"
            auto at = std::find(cmd.begin(), cmd.end(), flag);
            return at != cmd.end() && at + 1 != cmd.end() && (at + 1)->rfind("--", 0) != 0;
        };
        // "--flag=value" for a flag the preset gives as "--flag v" is split in two, to replace v below; any other
        // "--flag=value" stays one token (switches such as --vae take only that form)
        std::vector<std::string> extra;
        for (const std::string& a : given) {
            const size_t eq = a.find('=');
            const std::string name = a.rfind("--", 0) == 0 && eq != std::string::npos ? a.substr(0, eq) : a;
            if (name == "--seeds")
                fail_usage("--seeds: give it to sweep itself, before '--' (each run of a preset trains one seed; the sweep runs the seeds)");
            if (name != a && preset_has_value(name)) extra.insert(extra.end(), {name, a.substr(eq + 1)});
            else extra.push_back(a);
        }
        // a flag the preset's command already has (e.g. --steps) takes the new value in place; others are appended
        for (size_t i = 0; i < extra.size(); i++) {
            const bool has_value = i + 1 < extra.size() && extra[i + 1].rfind("--", 0) != 0;
            if (has_value && preset_has_value(extra[i])) {
                *(std::find(cmd.begin(), cmd.end(), extra[i]) + 1) = extra[i + 1];
            } else {
                cmd.push_back(extra[i]);
                if (has_value) cmd.push_back(extra[i + 1]);
            }
            if (has_value) i++;
        }
        label = n->name + (cli.get_bool("--paper") ? "-paper" : "");
        if (cli.get_bool("--paper") && !cli.given("--grid") && !n->paper_grid.empty()) grid = n->paper_grid;
    } else if (cli.get_bool("--paper")) {
        fail_usage("--paper: only with --preset");
    }
    if (cmd.empty()) fail_usage("no command: give '-- BINARY [ARGS…]' after the flags, or --preset (see --help)");
    if (grid.empty()) fail_usage("--grid: give at least one '--flag=v1,v2,…'");
    const std::vector<Axis> axes = parse_grid(grid);
    const std::vector<Metric> ms = parse_metrics(metrics);
    const int seeds = (int)cli.get_int("--seeds", 1, 1000);
    const uint64_t seed0 = cli.get_seed();
    for (const std::string& a : cmd)
        for (const char* f : {"--seed", "--out"})
            if (a == f || a.rfind(std::string(f) + "=", 0) == 0) fail_usage(std::string(f) + ": the sweep sets it for every run; drop it from the command");
    for (const Axis& ax : axes)
        for (const std::string& a : cmd)
            if (a == ax.flag || a.rfind(ax.flag + "=", 0) == 0) fail_usage(ax.flag + ": it is on the grid; drop it from the command");
    std::string bin = cmd[0];
    if (bin.find('/') == std::string::npos) bin = self_dir() + "/" + bin;
    if (access(bin.c_str(), X_OK) != 0) fail("sweep: " + bin + " is not an executable (build it first: make)");
    RunRecord rec;
    rec.threads = 1;  // the sweep's own; each run records its threads in its summary
    rec.seed = (int64_t)seed0;
    rec.seeds = seeds;
    set_run_record(rec);
    const std::string out = cli.has_value("--out") ? cli.get("--out") : default_run_dir("sweep", label);
    make_dirs(out);

    // every cell: the odometer over the axes, the first axis slowest
    std::vector<std::vector<int>> cells;
    std::vector<int> idx(axes.size(), 0);
    for (;;) {
        cells.push_back(idx);
        int a = (int)axes.size() - 1;
        while (a >= 0 && ++idx[a] == (int)axes[a].values.size()) idx[a--] = 0;
        if (a < 0) break;
    }
    const int total = (int)cells.size() * seeds;
    std::printf("sweep %s: %zu cells × %d seeds = %d runs of %s, in %s\n", label.c_str(), cells.size(), seeds, total, bin.c_str(), out.c_str());
    std::vector<std::vector<std::vector<double>>> vals(cells.size(), std::vector<std::vector<double>>(seeds));  // [cell][seed][metric]
    std::set<std::string> commits;
    const double t0 = now_seconds();
    int done = 0, ran = 0;
    for (size_t ci = 0; ci < cells.size(); ci++) {
        const std::string cname = cell_name(axes, cells[ci]);
        for (int k = 0; k < seeds; k++) {
            const std::string rdir = out + "/" + cname + "/seed" + std::to_string(k + 1);
            std::vector<std::string> argv = cmd;
            argv[0] = bin;
            for (size_t a = 0; a < axes.size(); a++) argv.push_back(axes[a].flag + "=" + axes[a].values[cells[ci][a]]);
            argv.insert(argv.end(), {"--seed", std::to_string(seed0 + (uint64_t)k), "--out", rdir});
            nlohmann::json prov;
            const bool finished = read_metrics(rdir, ms, vals[ci][k], &prov, nullptr);
            done++;
            if (cli.get_bool("--dry-run")) {
                std::printf("[%d/%d] %s", done, total, finished ? "finished: " : "");
                for (auto& a : argv) std::printf("%s ", a.c_str());
                std::printf("\n");
                continue;
            }
            if (!finished) {
                make_dirs(out + "/" + cname);
                std::string log;
                const double t1 = now_seconds();
                const int rc = run_program(argv, log);
                write_file_atomic(out + "/" + cname + "/seed" + std::to_string(k + 1) + ".log", log);
                if (rc != 0)
                    fail(strfmt("sweep: %s seed %d failed (exit %d); the finished runs are kept, rerun to resume. Its last lines (%s.log):\n%s", cname.c_str(),
                                k + 1, rc, rdir.c_str(), last_lines(log, 6).c_str()));
                std::string missing;
                if (!read_metrics(rdir, ms, vals[ci][k], &prov, &missing)) fail("sweep: " + (missing.empty() ? rdir + "/summary.json: not written" : missing));
                ran++;
                const double el = now_seconds() - t0;
                std::fprintf(stderr, "[%d/%d] %s seed %d: %.0f s;", done, total, cname.c_str(), k + 1, now_seconds() - t1);
                for (size_t m = 0; m < ms.size(); m++) std::fprintf(stderr, " %s %.4g", ms[m].name.c_str(), vals[ci][k][m]);
                std::fprintf(stderr, "  (elapsed %.0f s, ~%.0f s left)\n", el, el / ran * (total - done));
            } else {
                std::fprintf(stderr, "[%d/%d] %s seed %d: finished before, kept\n", done, total, cname.c_str(), k + 1);
            }
            if (prov.contains("commit")) commits.insert(prov["commit"].get<std::string>());
        }
    }
    if (cli.get_bool("--dry-run")) return 0;

    // the table: one row per cell, mean ± 95% interval over the seeds per metric
    std::string cmdline;
    for (const std::string& a : cmd) cmdline += (cmdline.empty() ? "" : " ") + a;
    std::string md = "# sweep " + label + "\n\n`" + cmdline + "` over `" + grid + "`, " + std::to_string(seeds) + " seeds (" +
                     std::to_string(seed0) + "…); mean ± 95% interval (Student t over the seeds; – with one seed)\n\n|";
    for (const Axis& ax : axes) md += " " + ax.flag + " |";
    for (const Metric& m : ms) md += " " + m.name + " |";
    md += "\n|";
    for (size_t i = 0; i < axes.size() + ms.size(); i++) md += "---|";
    md += "\n";
    TextOut csv(out + "/results.csv", csv_provenance_comment());
    csv.printf("cell");
    for (const Axis& ax : axes) csv.printf(",%s", ax.flag.substr(2).c_str());
    csv.printf(",seed");
    for (const Metric& m : ms) csv.printf(",%s", m.name.c_str());
    csv.printf("\n");
    nlohmann::json jcells = nlohmann::json::array();
    std::vector<std::vector<MeanSE>> agg(cells.size());
    for (size_t ci = 0; ci < cells.size(); ci++) {
        const std::string cname = cell_name(axes, cells[ci]);
        md += "|";
        nlohmann::json jc = {{"cell", cname}};
        for (size_t a = 0; a < axes.size(); a++) {
            md += " " + axes[a].values[cells[ci][a]] + " |";
            jc["flags"][axes[a].flag] = axes[a].values[cells[ci][a]];
        }
        for (int k = 0; k < seeds; k++) {
            csv.printf("%s", cname.c_str());
            for (size_t a = 0; a < axes.size(); a++) csv.printf(",%s", axes[a].values[cells[ci][a]].c_str());
            csv.printf(",%llu", (unsigned long long)(seed0 + (uint64_t)k));
            for (double v : vals[ci][k]) csv.printf(",%.9g", v);
            csv.printf("\n");
        }
        for (size_t m = 0; m < ms.size(); m++) {
            std::vector<double> v;
            for (int k = 0; k < seeds; k++) v.push_back(vals[ci][k][m]);
            const MeanSE s = mean_se(v);
            agg[ci].push_back(s);
            const double half = s.n > 1 ? t95(s.n - 1) * s.se : NAN;
            md += " " + strfmt("%.4g", s.mean) + (s.n > 1 ? " ± " + strfmt("%.2g", half) : std::string(" ± –")) + " |";
            jc["metrics"][ms[m].name] = {{"values", v}, {"mean", s.mean}, {"ci95", s.n > 1 ? half : NAN}, {"n", s.n}};
        }
        md += "\n";
        jcells.push_back(jc);
    }
    csv.commit();
    std::string cs;
    for (const std::string& c : commits) cs += (cs.empty() ? "" : ", ") + c;
    std::string again = "sweep";
    if (label != "sweep") {
        again += " --preset " + cli.preset_name() + (cli.get_bool("--paper") ? " --paper" : "");
        if (cli.given("--grid")) again += " --grid '" + grid + "'";
        if (cli.given("--metric")) again += " --metric '" + cli.get("--metric") + "'";
    } else {
        again += " --grid '" + grid + "' --metric '" + cli.get("--metric") + "'";
    }
    again += " --seeds " + std::to_string(seeds) + " --seed " + std::to_string(seed0) + " --out " + out + (label == "sweep" ? " -- " + cmdline : "");
    md += "\nRuns built from: " + cs + ". Regenerate (finished runs are kept): `" + again + "`\n\n" + provenance_line() + "\n";
    write_file_atomic(out + "/table.md", md);

    // one plot per metric: against the first axis (its values if all are numbers, else their index), one line per
    // combination of the other axes, 95% bars
    std::vector<std::string> plots;
    bool numeric = true;
    std::vector<double> xv;
    for (const std::string& v : axes[0].values) {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        numeric = numeric && end != v.c_str() && *end == 0 && std::isfinite(x);
        xv.push_back(x);
    }
    std::string xlabel = axes[0].flag;
    if (!numeric) {
        xlabel += " (";
        for (size_t i = 0; i < axes[0].values.size(); i++) {
            xv[i] = (double)i;
            xlabel += (i ? ", " : "") + std::to_string(i) + " = " + axes[0].values[i];
        }
        xlabel += ")";
    }
    for (size_t m = 0; m < ms.size(); m++) {
        LinePlot p = make_line_plot((label == "sweep" ? std::string("sweep") : "sweep " + label) + ": " + ms[m].name + " (mean, 95% interval over " + std::to_string(seeds) + " seeds)", xlabel, ms[m].name);
        std::map<std::string, Series> lines;
        std::map<std::string, std::vector<double>> bars;
        std::vector<std::string> order;
        for (size_t ci = 0; ci < cells.size(); ci++) {
            std::string key;
            for (size_t a = 1; a < axes.size(); a++) key += (key.empty() ? "" : " ") + axes[a].flag + "=" + axes[a].values[cells[ci][a]];
            if (!lines.count(key)) {
                order.push_back(key);
                lines[key].label = key;
                lines[key].markers = true;
            }
            Series& s = lines[key];
            s.x.push_back(xv[cells[ci][0]]);
            s.y.push_back(agg[ci][m].mean);
            bars[key].push_back(agg[ci][m].n > 1 ? t95(agg[ci][m].n - 1) * agg[ci][m].se : NAN);
        }
        for (const std::string& k : order) {
            p.series.push_back(lines[k]);
            p.yerr.push_back(bars[k]);
        }
        try {
            save_line_plot(out + "/" + ms[m].name + ".png", p);
            plots.push_back(ms[m].name + ".png");
        } catch (const Error& e) {
            std::fprintf(stderr, "sweep: no plot for %s: %s\n", ms[m].name.c_str(), e.what());
        }
    }
    nlohmann::json jaxes = nlohmann::json::array();
    for (const Axis& ax : axes) jaxes.push_back({{"flag", ax.flag}, {"values", ax.values}});
    nlohmann::json jm = nlohmann::json::array();
    for (const Metric& m : ms) jm.push_back({{"name", m.name}, {"pointer", m.ptr.to_string()}});
    write_run_summary(out + "/summary.json", {{"binary", "sweep"}, {"preset", cli.preset_name()}, {"paper", cli.get_bool("--paper")},
                                              {"command", cmd}, {"grid", jaxes}, {"metrics", jm}, {"seeds", seeds}, {"first_seed", seed0},
                                              {"cells", jcells}, {"run_commits", commits}, {"plots", plots}, {"wall_s", now_seconds() - t0},
                                              {"runs_this_time", ran}});
    std::printf("%s\nwrote %s/{table.md, results.csv, summary.json", md.c_str(), out.c_str());
    for (const std::string& p : plots) std::printf(", %s", p.c_str());
    std::printf("}\n");
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return cli_main(argc, argv, run); }
