// tint_experiments.h — the subcommands of the `tint` binary (src/tint.cpp holds only its flags and this
// table's dispatch). Each reads its flags from the Cli and returns the process exit code.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/text.h"
#include "engine/cli.h"
#include "models/gpt.h"
#include "models/tint/tint_oracle.h"
#include "models/tint/tint_sim.h"

namespace icl::tint_cmd {

int cmd_check(const Cli& cli);
int cmd_params(const Cli& cli);
int cmd_train(const Cli& cli);
int cmd_lm(const Cli& cli);
int cmd_fewshot(const Cli& cli);
// --seeds N of lm / fewshot: the finished runs' summary.json (one per seed, in `runs`) as one table of means ± 95%
// intervals over the seeds, with paired differences (the update vs vanilla; TinT vs dynamic evaluation), written
// to dir/{table.md, summary.json}.
int aggregate_seeds(const Cli& cli, const std::string& sub, const std::string& dir, const std::vector<std::string>& runs);
int cmd_eps(const Cli& cli);
int cmd_bench(const Cli& cli);


// ---- shared by tint_experiments.cpp and tint_studies.cpp ----
struct Budget { int k, s; };                      // k simulated top layers, s inner steps
std::vector<Budget> budgets(const Cli& cli, int L);  // --budgets k:s,…
GPTConfig aux_config(const Cli& cli, int V);      // the auxiliary model from --layers --width --heads --seq --act
TintConfig tint_config(const Cli& cli, const GPTConfig& g);
GPTConfig loaded_config(const Cli& cli);          // --load's / --load-hf's GPT config (architecture flags refused beside it)
bool aux_from_file(const Cli& cli);               // --load or --load-hf given
void load_aux(GPT<float>& m, const Cli& cli);     // m's weights from --load or --load-hf
// lm's text: the bytes of --data, or with --load-hf its tokens (--tokenizer, else the model folder's tokenizer)
TextData aux_text(const Cli& cli, const GPTConfig& g);
// The auxiliary model's config before any work: --load's (its vocabulary checked against `task`), else the flags'.
GPTConfig planned_aux_config(const Cli& cli, const std::string& task);
// --device: where the fp32 simulator runs (and the auxiliary model trains). The references stay host code: oracle A,
// the fp64 simulator of check/eps, and the auxiliary model's own evaluations (ICL, exact SGD) run on the CPU.
inline Device sim_device(const Cli& cli) { return parse_device(cli.get("--device")); }
// The auxiliary model: trained here on `task` (text | fewshot), or read from --load. `text` is the text task's data
// when the caller has read it already (nullptr: train_aux reads --data itself).
GPT<float> train_aux(const Cli& cli, const std::string& task, const std::string& dir, const std::string& save, const TextData* text);
GPT<float> load_or_train(const Cli& cli, const std::string& task, const std::string& dir, const TextData* text);
void write_summary(const std::string& dir, const Cli& cli, nlohmann::json j);
template <typename to, typename from>
inline void copy_params(GPT<to>& dst, const GPT<from>& src) {
    const std::vector<from> h = src.s.to_host(src.s.params, 0, src.s.ptable.total);
    std::vector<to> p(h.begin(), h.end());
    dst.s.upload(dst.s.params, 0, p.data(), p.size());
}


// What check and eps share: the auxiliary model (--load, or random with --init-std) in fp64 and fp32, the simulator
// config, and one random sequence of min(T, 32) tokens whose first half trains.
struct CheckSetup {
    GPTConfig g;
    GPT<double> aux;
    GPT<float> aux32;
    TintConfig c;
    TintInput in;
    CheckSetup(const Cli& cli, uint64_t seed, uint64_t salt)
        : g(cli.has_value("--load") ? loaded_config(cli) : aux_config(cli, 64)), aux(g, Device::cpu, seed), aux32(g, Device::cpu, seed) {
        if (cli.has_value("--load")) {
            aux32.s.load(cli.get("--load"));
            copy_params(aux, aux32);
        } else {
            tint_random_aux(aux, seed, cli.get_double("--init-std", 0, 10));
            copy_params(aux32, aux);
        }
        c = tint_config(cli, g);
        Rng r(seed * salt + 1);
        in.B = 1;
        in.T = std::min(g.maxT, 32);
        for (int t = 0; t < in.T; t++) { in.ids.push_back((int)r.below(g.V)); in.train.push_back(t < in.T / 2); }
    }
};

}  // namespace icl::tint_cmd
