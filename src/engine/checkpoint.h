// checkpoint.h — model checkpoints: a TensorTable's parameters as one .safetensors file.
//
// A checkpoint is an ordinary .safetensors file (see safetensors.h) holding every tensor of the model's
// parameter registry under its registry name, as F32 (float models) or F64 (double models), plus
//   __metadata__ = {"format": "icl.cpp", "format_version": "1", "model": <kind>, "config": <config JSON>,
//                   ...extra string entries the caller adds (step, seed, val loss, ...)}
// so Python users can open it with safetensors / NumPy / PyTorch and see what produced it.
//
// load_checkpoint refuses, with a one-line icl::Error naming the file:
//   * a file that is not valid safetensors (see safetensors.h for the list),
//   * a file not written by icl.cpp ("not an icl.cpp checkpoint"), or with another format_version,
//   * another model kind ("holds a 'cgt' model, this run builds 'gpt'"),
//   * another config: both JSON configs are parsed and compared key by key (nested objects as a.b),
//     and the first differing key is named with both values. Pass as `config_json` only what fixes the
//     model (sizes, options), not run settings like --steps, or every resumed run will be refused;
//   * a missing tensor, an extra tensor, a tensor of another shape, or an I32 tensor.
// F32 checkpoints load into double models and F64 into float ones (converted element by element).
// Every check happens before `params` is touched; only an I/O error during the final read (the file
// changing underneath us) can leave `params` partly overwritten. Padding between tensors is untouched.
//
//   icl::save_checkpoint("out/gpt/run/model.safetensors", "gpt", cfg.to_json(), table, params, {{"step", "500"}});
//   icl::CheckpointInfo ci = icl::read_checkpoint_metadata(flag_load);   // config before building the model
//   icl::load_checkpoint(flag_load, "gpt", cfg.to_json(), table, params);
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/common.h"
#include "engine/tensor.h"

namespace icl {

// The icl.cpp checkpoint format version this build writes and reads.
constexpr const char* kCheckpointFormatVersion = "1";

struct CheckpointInfo {
    std::string path;
    std::string model;           // model kind, e.g. "gpt"
    std::string config;          // the config JSON text as saved
    std::string format_version;  // always kCheckpointFormatVersion (anything else is refused)
    std::map<std::string, std::string> metadata;  // the whole __metadata__, including the keys above
};

// Resumable checkpoints (models/trainer.h, --save-every) also hold the optimizer state: for every registry tensor
// <name>, "adamw.m.<name>" and "adamw.v.<name>", laid out like the parameters. A plain load reads the parameters
// and skips every tensor under kOptimizerPrefix.
constexpr const char* kOptimizerPrefix = "adamw.";

// Write `table`'s tensors from `params` (laid out as table.offsets says) to `path`, atomically (the
// previous file at `path` survives a failed save). `extra` must not use the keys format,
// format_version, model or config (an internal error otherwise). `config_json` must be valid JSON.
// `companions`: (prefix, buffer laid out like params) pairs saved as <prefix><name> for every tensor; each
// prefix starts with kOptimizerPrefix.
template <class real>
void save_checkpoint(const std::string& path, const std::string& model_kind, const std::string& config_json,
                     const TensorTable& table, const real* params, const std::map<std::string, std::string>& extra = {},
                     const std::vector<std::pair<std::string, const real*>>& companions = {});

// Validate `path` against (model_kind, config_json, table) as described above, then fill `params`.
template <class real>
void load_checkpoint(const std::string& path, const std::string& model_kind, const std::string& config_json,
                     const TensorTable& table, real* params);

// Read the companion tensors <prefix><name> of a checkpoint already accepted by load_checkpoint, for each (prefix,
// out) pair, into `out` (laid out like the parameters). Refuses, naming the file, one that lacks any of them ("not
// resumable") or has another shape, before reading.
template <class real>
void load_checkpoint_companions(const std::string& path, const TensorTable& table, const std::vector<std::pair<std::string, real*>>& outs);

// The config saved in a checkpoint, parsed; a file error naming it when it is not JSON.
nlohmann::json checkpoint_config_json(const CheckpointInfo& ci);

// Open and fully validate a checkpoint, and return its metadata (without reading the tensors). Refuses
// non-icl.cpp files and other format versions, like load_checkpoint.
CheckpointInfo read_checkpoint_metadata(const std::string& path);

// The first difference between two JSON configs, as "'key': A in the checkpoint, B in this run", or ""
// when they are equal (numbers compare by value: 4 == 4.0). Throws icl::Error if either is not JSON.
// One integer of a model config read back from a file: present, an integer, in [lo, hi] (hard limits, checked
// before anything is sized from it); otherwise a file error (exit 1) naming the model, the key and the value.
int config_int(const nlohmann::json& j, const char* key, const char* model, int64_t lo, int64_t hi);
// Run a config's validate() on values read from a file: what would be a flag error for a command line is a
// file error here (exit 1, "<model> config in the file: …").
template <typename Config>
void validate_file_config(const Config& c, const char* model) {
    try {
        c.validate();
    } catch (const Error& e) {
        fail(std::string(model) + " config in the file: " + e.what());
    }
}

std::string config_difference(const std::string& saved_json, const std::string& current_json);

}  // namespace icl
