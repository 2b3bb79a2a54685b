// provenance.h — where a number came from. Every summary.json gets a "provenance" object, every results CSV and
// log.csv a first comment line, every table.md a closing line, all saying the same:
//
//   git commit (and "+dirty" when the build had uncommitted changes), the compiler and its flags, the CPU model and
//   the vector ISA the binary was built for, the OpenMP threads, the device, the seed(s), the date (UTC).
//
// The commit and flags are the BUILD's (compiled into engine/provenance.cpp by the Makefile / CMake), not the
// working tree's at run time: a binary copied elsewhere still says what it is. The run-time part (threads, device,
// seeds) is recorded by apply_run_flags (engine/cli.h) when a binary starts.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/device.h"

namespace icl {

std::string build_commit();  // "1a2b3c4d5e6f" or "1a2b3c4d5e6f+dirty" ("unknown" outside a git checkout)
std::string build_compiler();  // "g++ 12.2.0 -O3 -march=native"
std::string cpu_model();       // /proc/cpuinfo: model name (microarchitecture, family, model), e.g. "AMD EPYC (Zen 4, family 25 model 17)"
std::string isa_path();        // the widest vector ISA compiled in: "avx512" | "avx2" | "generic"

// What a run records about itself; set once when the binary starts (apply_run_flags).
struct RunRecord {
    int threads = 0;
    Device dev = Device::cpu;
    int64_t seed = -1;    // --seed (-1: the binary has none)
    int seeds = 1;        // --seeds: runs per configuration (each experiment derives their seeds from --seed; see its --help)
};
void set_run_record(const RunRecord& r);
const RunRecord& run_record();
// While one seed of a --seeds run executes, the record says that seed alone (seed, 1 seed); the whole run's record
// comes back when the scope ends (its table then names the first seed and the count).
struct SeedScope {
    RunRecord saved;
    explicit SeedScope(int64_t seed) : saved(run_record()) {
        RunRecord r = saved;
        r.seed = seed;
        r.seeds = 1;
        set_run_record(r);
    }
    ~SeedScope() { set_run_record(saved); }
    SeedScope(const SeedScope&) = delete;
    SeedScope& operator=(const SeedScope&) = delete;
};

nlohmann::json provenance_json();   // {"commit", "compiler", "cpu", "isa", "threads", "device", "seeds", "date"}
std::string provenance_line();      // the same on one line: "icl.cpp <commit>, <compiler>, <cpu> (<isa>), …"
// A results CSV with the provenance as its first line, "# icl.cpp …" (read_csv, NumPy's genfromtxt and pandas with
// comment="#" skip it).
std::string csv_provenance_comment();

// A summary.json with the "provenance" object added (through write_json: atomic, valid UTF-8).
void write_run_summary(const std::string& path, nlohmann::json j);

}  // namespace icl
