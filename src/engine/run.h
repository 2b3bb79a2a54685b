// run.h — a training run's output folder: log.csv, summary.json, the progress line.
//
//   out/<binary>/<run>/log.csv        one row per logged step (step, losses, metrics, ms/step, tokens/s)
//   out/<binary>/<run>/summary.json   final metrics + the full configuration (every flag's value)
//   out/<binary>/<run>/*.png          plots (loss.png at least), see src/report/plot.h
//
// The progress line (step, loss, rate, ETA) rewrites itself on a terminal; when stderr is not a
// terminal it prints one line every `every` steps and on the last step.
#pragma once
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/fileio.h"  // write_file_atomic: every file of a run goes through it

namespace icl {

// Create `dir` (and parents). Fails with a message naming the path.
void make_dirs(const std::string& dir);
// Default run directory: out/<binary>/<name>-<YYYYmmdd-HHMMSS>[-k] (a fresh one; never reused).
std::string default_run_dir(const std::string& binary, const std::string& name);
// A subcommand's run directory, created: --out if given, else default_run_dir(binary, sub).
class Cli;
std::string subcommand_run_dir(const Cli& cli, const std::string& binary, const std::string& sub);

// CSV log with a fixed header; NaN cells are written empty. The whole file is kept in memory and written through
// the atomic writer (write_file_atomic): at creation, then at most about once a second as rows arrive (less often
// when the log is large: writing it stays under ~2% of the run's time), at every flush() and when the log is
// destroyed (an error unwinding the run included). A crash loses at most the rows since the last write, never
// leaves a half-written line, and a resumed run's log replaces the old one only once it is whole; a failed write
// (disk full, …) stops the run with an error naming the file.
class CsvLog {
public:
    CsvLog() = default;
    // `earlier`: rows written first (a resumed run keeps its log up to the checkpoint's step).
    CsvLog(const std::string& path, std::vector<std::string> columns, const std::vector<std::map<std::string, double>>& earlier = {});
    ~CsvLog();  // a last write; an error there is reported on stderr (it may run while another error unwinds)
    CsvLog(const CsvLog&) = delete;
    CsvLog& operator=(const CsvLog&) = delete;
    void row(const std::map<std::string, double>& values);  // unknown keys are a bug
    void flush();                                           // write the file now
    const std::string& path() const { return path_; }
    // Column `name` of every row written so far (for plots at the end of a run).
    std::vector<double> column(const std::string& name) const;

private:
    std::string path_, text_;
    std::vector<std::string> cols_;
    std::vector<std::vector<double>> rows_;
    bool dirty_ = false;
    double last_write_ = 0, write_seconds_ = 0;  // when the file was last written, and how long that took
};

class Progress {
public:
    Progress(int total_steps, int every);
    // Call once per step; `extra` is appended (e.g. "val 1.23").
    void update(int step, double loss, double tokens_per_s, const std::string& extra = "");
    void finish();

private:
    int total_, every_;
    double t0_;
    bool tty_;
    bool dirty_ = false;
};

nlohmann::json cli_json(const std::map<std::string, std::string>& values);

// JSON text that is valid whatever bytes the strings inside hold: invalid UTF-8 (a byte-level model's sample,
// a flag value) becomes U+FFFD instead of an exception. indent < 0: one line.
std::string json_text(const nlohmann::json& j, int indent = 2);
// write_file_atomic(path, json_text(j) + "\n") — every summary.json and index.json.
void write_json(const std::string& path, const nlohmann::json& j);

}  // namespace icl
