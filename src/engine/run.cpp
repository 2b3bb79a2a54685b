// run.cpp — see run.h.
#include "engine/run.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>

#include "engine/cli.h"
#include "engine/common.h"
#include "engine/provenance.h"

namespace icl {

void make_dirs(const std::string& dir) {
    if (dir.empty()) return;
    std::string cur;
    size_t i = 0;
    while (i <= dir.size()) {
        size_t j = dir.find('/', i);
        if (j == std::string::npos) j = dir.size();
        cur = dir.substr(0, j);
        if (!cur.empty() && cur != ".") {
            if (mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
                fail("cannot create directory '" + cur + "': " + std::strerror(errno));
            struct stat st;
            if (stat(cur.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) fail("'" + cur + "' exists and is not a directory");
        }
        i = j + 1;
    }
}

std::string default_run_dir(const std::string& binary, const std::string& name) {
    std::time_t t = std::time(nullptr);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&t));
    std::string base = "out/" + binary + "/" + name + "-" + stamp, dir = base;
    struct stat st;
    for (int k = 2; stat(dir.c_str(), &st) == 0; k++) dir = base + "-" + std::to_string(k);
    return dir;
}

std::string subcommand_run_dir(const Cli& cli, const std::string& binary, const std::string& sub) {
    std::string d = cli.has_value("--out") ? cli.get("--out") : default_run_dir(binary, sub);
    make_dirs(d);
    return d;
}

CsvLog::CsvLog(const std::string& path, std::vector<std::string> columns, const std::vector<std::map<std::string, double>>& earlier)
    : path_(path), cols_(std::move(columns)) {
    check_writable(path);
    text_ = csv_provenance_comment();  // "# icl.cpp <commit>, …" (engine/provenance.h)
    for (size_t i = 0; i < cols_.size(); i++) text_ += (i ? "," : "") + cols_[i];
    text_ += "\n";
    for (auto& r : earlier) row(r);
    flush();
}

CsvLog::~CsvLog() {
    if (path_.empty() || !dirty_) return;
    try {
        flush();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "warning: %s\n", e.what());
    }
}

void CsvLog::flush() {
    const double t0 = now_seconds();
    write_file_atomic(path_, text_);
    last_write_ = now_seconds();
    write_seconds_ = last_write_ - t0;
    dirty_ = false;
}

void CsvLog::row(const std::map<std::string, double>& values) {
    ICL_ASSERT(!path_.empty());
    for (auto& kv : values) {
        bool known = false;
        for (auto& c : cols_) known |= (c == kv.first);
        ICL_ASSERT_MSG(known, "log column not declared: " + kv.first);
    }
    std::vector<double> r;
    std::string line;
    for (size_t i = 0; i < cols_.size(); i++) {
        auto it = values.find(cols_[i]);
        double v = it == values.end() ? NAN : it->second;
        r.push_back(v);
        if (i) line += ',';
        if (std::isfinite(v)) line += strfmt("%.9g", v);
    }
    text_ += line + "\n";
    rows_.push_back(std::move(r));
    dirty_ = true;
    // a write at most once a second, and at most ~2% of the time (50× the last write's duration apart)
    if (last_write_ > 0 && now_seconds() - last_write_ >= std::max(1.0, 50 * write_seconds_)) flush();
}

std::vector<double> CsvLog::column(const std::string& name) const {
    size_t c = cols_.size();
    for (size_t i = 0; i < cols_.size(); i++)
        if (cols_[i] == name) c = i;
    ICL_ASSERT_MSG(c < cols_.size(), "no log column " + name);
    std::vector<double> out;
    for (auto& r : rows_) out.push_back(r[c]);
    return out;
}

Progress::Progress(int total_steps, int every) : total_(total_steps), every_(every > 0 ? every : 1) {
    t0_ = now_seconds();
    tty_ = isatty(fileno(stderr));
}

static std::string fmt_duration(double s) {
    if (!std::isfinite(s) || s < 0) return "?";
    int x = (int)(s + 0.5);
    if (x >= 3600) return strfmt("%dh%02dm", x / 3600, (x / 60) % 60);
    if (x >= 60) return strfmt("%dm%02ds", x / 60, x % 60);
    return strfmt("%ds", x);
}

void Progress::update(int step, double loss, double tokens_per_s, const std::string& extra) {
    int done = step + 1;
    bool last = done >= total_;
    if (!tty_ && !last && step != 0 && done % every_ != 0) return;
    double el = now_seconds() - t0_;
    double eta = done > 0 ? el / done * (total_ - done) : NAN;
    std::string line = strfmt("step %*d/%d  loss %.4f  %.0f tok/s  elapsed %s  eta %s", (int)std::to_string(total_).size(),
                              done, total_, loss, tokens_per_s, fmt_duration(el).c_str(), fmt_duration(eta).c_str());
    if (!extra.empty()) line += "  " + extra;
    if (tty_) {
        std::fprintf(stderr, "\r%s\033[K", line.c_str());
        dirty_ = true;
    } else {
        std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
}

void Progress::finish() {
    if (tty_ && dirty_) std::fprintf(stderr, "\n");
    dirty_ = false;
}

nlohmann::json cli_json(const std::map<std::string, std::string>& values) {
    nlohmann::json j = nlohmann::json::object();
    for (auto& kv : values) j[kv.first.substr(2)] = kv.second;
    return j;
}

std::string json_text(const nlohmann::json& j, int indent) {
    return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

void write_json(const std::string& path, const nlohmann::json& j) { write_file_atomic(path, json_text(j) + "\n"); }

}  // namespace icl
