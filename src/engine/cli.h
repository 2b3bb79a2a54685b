// cli.h — one command-line parser for every binary.
//
//   Cli cli("train_gpt", "Train the baseline GPT on a synthetic task or a text file.");
//   add_common_flags(cli, {.steps = "300", ...});       // the shared flags of DESIGN.md
//   cli.flag("--task", "arith", "arith | linreg | text");
//   cli.preset("tiny", "a seconds-long smoke run", {{"--steps", "20"}, {"--layers", "2"}});
//   if (!cli.parse(argc, argv)) return 0;                // --help printed
//   int steps = cli.get_int("--steps", 1);               // validated: bad value -> Error(exit 2)
//
// A value comes from the command line if given, else from the chosen --preset, else the default.
// Every problem (unknown flag, missing value, bad number, out of range) is one line naming the flag,
// thrown as icl::Error with exit code 2.
#pragma once
#include <cstdint>
#include <climits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/device.h"

namespace icl {

class Cli {
public:
    Cli(std::string program, std::string summary);

    // Register a flag "--name" with its default (as text; "" = unset) and one line of help.
    // Boolean switches: flag_switch("--fold", "…"): present = "1", absent = "0".
    void flag(const std::string& name, const std::string& def, const std::string& help);
    void flag_switch(const std::string& name, const std::string& help);
    // A flag that several models' flag sets share (--layers of the GPT and the CGT's x stream): registered by the
    // first set that asks, a no-op for the next.
    void flag_shared(const std::string& name, const std::string& def, const std::string& help);
    bool has_flag(const std::string& name) const;
    // Change a registered flag's default (binaries tune the shared flags).
    void set_default(const std::string& name, const std::string& def);
    // A named preset: a set of flag values applied before the command line.
    void preset(const std::string& name, const std::string& help, std::vector<std::pair<std::string, std::string>> values);
    // Allow positional arguments (e.g. subcommands); described in --help as `usage`.
    void positionals(const std::string& usage, int min_count, int max_count);
    void epilog(const std::string& text);  // extra text at the end of --help (examples)
    // An old spelling of a flag: given on the command line, it is refused with one line naming the new one.
    void renamed(const std::string& old_name, const std::string& new_name);

    // --resume: the flags of the run being continued. After parse(), every flag not given on the command line takes
    // its value from `saved` (ahead of presets and defaults); a flag given with a value other than the saved one is
    // refused (exit 2, naming both) unless it is one of `may_change`. `source` names the checkpoint in messages.
    void inherit(const std::map<std::string, std::string>& saved, const std::vector<std::string>& may_change, const std::string& source);

    // Parse. Returns false if --help was given (help already printed to stdout).
    bool parse(int argc, char** argv);
    bool parse(const std::vector<std::string>& args);

    std::string get(const std::string& name) const;  // raw text
    bool given(const std::string& name) const;       // set explicitly on the command line?
    bool has_value(const std::string& name) const;   // non-empty after preset/default
    bool get_bool(const std::string& name) const;
    // An integer in [min, max], checked in 64 bits before any narrowing; the default max is INT32_MAX, so the value fits
    // an int. Accepts 1e4-style integers, refuses fractions, hexadecimal, NaN and infinities.
    int64_t get_int(const std::string& name, int64_t min = INT64_MIN, int64_t max = INT32_MAX) const;
    uint64_t get_seed() const;  // --seed: an integer in [0, 9e15]
    double get_double(const std::string& name, double min = -1e308, double max = 1e308) const;
    std::string get_choice(const std::string& name, const std::vector<std::string>& choices) const;
    // Comma lists ("a,b,c"; an empty value is the empty list; an empty item is refused).
    std::vector<std::string> get_list(const std::string& name) const;
    std::vector<int64_t> get_int_list(const std::string& name, int64_t min = INT64_MIN, int64_t max = INT64_MAX) const;
    std::vector<double> get_double_list(const std::string& name, double min = -1e308, double max = 1e308) const;
    const std::vector<std::string>& args() const { return positional_; }
    const std::string& program() const { return program_; }
    std::string preset_name() const { return preset_; }

    std::string help_text() const;
    // Every flag's effective value, for summary.json / checkpoints: {"--steps": "300", ...}.
    std::map<std::string, std::string> values() const;

private:
    struct Flag { std::string name, def, help; bool is_switch = false; };
    struct Preset { std::string name, help; std::vector<std::pair<std::string, std::string>> values; };
    const Flag& find(const std::string& name) const;

    std::string program_, summary_, usage_, epilog_;
    std::vector<Flag> flags_;
    std::vector<Preset> presets_;
    std::vector<std::pair<std::string, std::string>> renamed_;
    std::map<std::string, std::string> given_, inherited_, from_preset_;
    std::vector<std::string> positional_;
    int pos_min_ = 0, pos_max_ = 0;
    std::string preset_;
};

// The flags every binary shares (DESIGN.md "Conventions"): --device --threads --seed --steps --batch
// --lr --out --dump-npy --load --save --preset(registered by presets) ; defaults per binary.
struct CommonDefaults {
    std::string steps = "200", batch = "8", lr = "1e-3", seed = "1";
};
void add_common_flags(Cli& cli, const CommonDefaults& d);

// Apply --threads (0 = OpenMP default) to OpenMP; returns the thread count in use.
int apply_threads(const Cli& cli);

// The run-wide flags every binary applies first: --threads (to OpenMP), --device (checked usable here), --tf32
// (when the binary has it).
struct RunEnv {
    int threads = 1;
    Device dev = Device::cpu;
};
RunEnv apply_run_flags(const Cli& cli);

// Subcommands (iclca, tint, duallens): the table is written once in the binary; the positional usage
// "SUBCOMMAND (train | convert | …)" and the dispatch come from it. An unknown name is a usage error listing them.
struct Subcommand {
    std::string name;
    int (*run)(const Cli&);
};
void add_subcommands(Cli& cli, const std::vector<Subcommand>& table);
// The flags only some subcommands (or tasks) read, as (flag, the ones that read it; empty = none): a flag given on the
// command line to any other is refused (exit 2, "--save: iclca e1 does not use it (only train, convert)"). `label`
// names `sub` in the message (default: "<program> <sub>"; the task flags say "--task linreg").
using FlagUsers = std::vector<std::pair<std::string, std::vector<std::string>>>;
void refuse_unused_flags(const Cli& cli, const std::string& sub, const FlagUsers& users, const std::string& label = "");
int run_subcommand(const Cli& cli, const std::vector<Subcommand>& table);

// --seeds N for a binary whose whole run is one experiment (train_gpt, tint lm/fewshot): the command line `args`
// once per seed, each with --seed seed0+k and --out DIR/seed<k+1> in place of the given --seed, --seeds and --out.
//   per_seed_args({"--steps", "5", "--seeds", "2"}, 7, 2, "out/x") = {{"--steps", "5", "--seed", "7", "--out", "out/x/seed1"},
//                                                                   {"--steps", "5", "--seed", "8", "--out", "out/x/seed2"}}
std::vector<std::vector<std::string>> per_seed_args(const std::vector<std::string>& args, uint64_t seed0, int n, const std::string& dir);

// Every binary's main():   int main(int argc, char** argv) { return icl::cli_main(argc, argv, run); }
// Runs `run`; an icl::Error becomes "error: <message>" on stderr and its exit code (2 for bad flags),
// any other std::exception "error: <what>" and exit code 1.
int cli_main(int argc, char** argv, int (*run)(int, char**));

}  // namespace icl
