// fuzz_targets.cpp — see fuzz_targets.h.
#include "fuzz_targets.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "data/bpe_tokenizer.h"
#include "data/task.h"
#include "engine/checkpoint.h"
#include "engine/cli.h"
#include "engine/common.h"
#include "engine/npy.h"
#include "engine/npy_compare.h"
#include "engine/safetensors.h"
#include "models/cgt/cgt.h"
#include "models/gpt.h"
#include "models/iclca/kernel_lm.h"
#include "models/trainer.h"
#include "report/plot.h"

namespace icl_fuzz {

namespace {

// A per-process scratch folder; the input becomes the file `name` in it.
std::string scratch() {
    static const std::string d = [] {
        std::string p = (std::filesystem::temp_directory_path() / ("icl_fuzz_" + std::to_string((long)getpid()))).string();
        std::filesystem::create_directories(p);
        return p;
    }();
    return d;
}

std::string as_file(const std::string& name, const uint8_t* data, size_t size) {
    const std::string p = scratch() + "/" + name;
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write((const char*)data, (std::streamsize)size);
    return p;
}

// Run `f`; a refusal is the normal outcome for garbage.
template <typename F>
int refusal_ok(F f) {
    try {
        f();
    } catch (const icl::Error&) {
    }
    return 0;
}

}  // namespace

int checkpoint(const uint8_t* data, size_t size) {
    const std::string p = as_file("f.safetensors", data, size);
    return refusal_ok([&] {
        icl::SafetensorsFile f = icl::safetensors_open(p);
        for (const std::string& n : f.names()) {
            const icl::StTensorInfo& t = f.info(n);
            if (icl::numel(t.shape) > (1 << 20)) continue;  // the reader validated it; no need to allocate it here
            if (t.dtype == icl::StDtype::I32) {
                std::vector<int32_t> v((size_t)icl::numel(t.shape));
                f.read(n, t.shape, v.data());
            } else {
                std::vector<double> v((size_t)icl::numel(t.shape));
                f.read(n, t.shape, v.data());
            }
        }
        icl::CheckpointInfo ci = icl::read_checkpoint_metadata(p);
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(ci.config);
        } catch (const nlohmann::json::exception&) {
            return;  // the loaders refuse this (tested in test_checkpoint); the config readers need JSON
        }
        if (ci.model == "gpt") icl::validate_file_config(icl::GPTConfig::from_json(j), "gpt");
        if (ci.model == "cgt") icl::validate_file_config(icl::CGTConfig::from_json(j), "cgt");
        if (ci.model == "kernel_lm") icl::validate_file_config(icl::KernelLMConfig::from_json(j), "kernel_lm");
    });
}

int npy(const uint8_t* data, size_t size) {
    const std::string p = as_file("f.npy", data, size);
    return refusal_ok([&] { (void)icl::npy_load(p).to_double(); });
}

int csv(const uint8_t* data, size_t size) {
    const std::string p = as_file("log.csv", data, size);
    return refusal_ok([&] {
        icl::CsvTable t = icl::read_csv(p);
        for (size_t c = 0; c < t.header.size(); c++) (void)t.col(t.header[c]);
    });
}

int index_json(const uint8_t* data, size_t size) {
    std::filesystem::create_directories(scratch() + "/dump");
    as_file("dump/index.json", data, size);
    return refusal_ok([&] {
        std::FILE* null = std::fopen("/dev/null", "w");
        try {
            icl::npydiff_dirs(scratch() + "/dump", scratch() + "/dump", 1e-6, 1e-5, null);
        } catch (...) {
            if (null) std::fclose(null);
            throw;
        }
        if (null) std::fclose(null);
    });
}

int bpe(const uint8_t* data, size_t size) {
    const std::string p = as_file("merges.bpe", data, size);
    return refusal_ok([&] {
        icl::BPE b = icl::BPE::load(p);
        std::vector<int> ids = b.encode("Hello, world! 123 héllo\n\tthe end");
        (void)b.decode(ids);
    });
}

int cli(const uint8_t* data, size_t size) {
    std::vector<std::string> args(1);
    for (size_t i = 0; i < size && args.size() < 64; i++) {
        if (data[i] == '\n') args.emplace_back();
        else args.back() += (char)data[i];
    }
    for (auto& a : args)
        if (a == "--help" || a == "-h") a = "--steps";  // printing the help text is not what is being tested
    return refusal_ok([&] {
        icl::Cli c("fuzz", "every shared flag set");
        icl::add_common_flags(c, {});
        icl::add_task_flags(c);
        icl::add_gpt_flags(c);
        icl::add_task_shape_flags(c);
        icl::add_train_flags(c);
        c.preset("tiny", "a preset", {{"--steps", "20"}, {"--layers", "2"}});
        if (!c.parse(args)) return;
        for (const auto& kv : c.values()) {
            (void)c.get(kv.first);
            try { (void)c.get_int(kv.first, 0); } catch (const icl::Error&) {}
            try { (void)c.get_double(kv.first, -1e9, 1e9); } catch (const icl::Error&) {}
            try { (void)c.get_list(kv.first); } catch (const icl::Error&) {}
        }
        (void)icl::gpt_config_from_cli(c, icl::GPTConfig{});
    });
}

const std::vector<Named>& targets() {
    static const std::vector<Named> t = {{"checkpoint", checkpoint}, {"npy", npy}, {"csv", csv},
                                         {"index_json", index_json}, {"bpe", bpe}, {"cli", cli}};
    return t;
}

}  // namespace icl_fuzz
