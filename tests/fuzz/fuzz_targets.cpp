// fuzz_targets.cpp — see fuzz_targets.h.
#include "fuzz_targets.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "data/bpe_tokenizer.h"
#include "data/gpt2_tokenizer.h"
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
#include "models/pretrained.h"
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
            } else if (icl::st_dtype_is_float(t.dtype)) {
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

int gpt2_tokenizer(const uint8_t* data, size_t size) {
    const uint8_t* nul = (const uint8_t*)std::memchr(data, 0, size);
    const size_t cut = nul ? (size_t)(nul - data) : size;
    const std::string dir = scratch() + "/gpt2tok";
    std::filesystem::create_directories(dir);
    as_file("gpt2tok/vocab.json", data, cut);
    as_file("gpt2tok/merges.txt", data + std::min(size, cut + 1), size - std::min(size, cut + 1));
    return refusal_ok([&] {
        icl::GPT2Tokenizer t = icl::GPT2Tokenizer::load(dir);
        const std::string text = "Hello, world! 123 h\xc3\xa9llo\n\tthe end \xff";
        if (t.decode(t.encode(text)) != text) std::abort();  // every byte string round-trips
    });
}

int gpt2_encode(const uint8_t* data, size_t size) {
    // a small tokenizer: the 256 byte symbols of GPT-2's alphabet (bytes_to_unicode) and a few merges
    static const icl::GPT2Tokenizer tok = [] {
        std::vector<int> bs;
        for (int b = '!'; b <= '~'; b++) bs.push_back(b);
        for (int b = 0xA1; b <= 0xAC; b++) bs.push_back(b);
        for (int b = 0xAE; b <= 0xFF; b++) bs.push_back(b);
        std::vector<int> cs = bs;
        for (int b = 0, n = 0; b < 256; b++)
            if (std::find(bs.begin(), bs.end(), b) == bs.end()) { bs.push_back(b); cs.push_back(256 + n++); }
        auto utf8 = [](int c) {
            std::string s;
            if (c < 0x80) s += (char)c;
            else { s += (char)(0xC0 | (c >> 6)); s += (char)(0x80 | (c & 0x3F)); }
            return s;
        };
        std::map<int, std::string> sym;
        for (size_t i = 0; i < bs.size(); i++) sym[bs[i]] = utf8(cs[i]);
        nlohmann::json v = nlohmann::json::object();
        for (int b = 0; b < 256; b++) v[sym[b]] = b;
        const std::vector<std::pair<std::string, std::string>> merges = {{sym[' '], "t"}, {"h", "e"}, {sym[' '] + "t", "he"}, {"i", "n"}, {sym[' '], "a"}};
        std::string mt = "#version: 0.2\n";
        for (auto& m : merges) {
            v[m.first + m.second] = (int)v.size();
            mt += m.first + " " + m.second + "\n";
        }
        const std::string dir = scratch() + "/gpt2enc";
        std::filesystem::create_directories(dir);
        const std::string vj = v.dump();
        as_file("gpt2enc/vocab.json", (const uint8_t*)vj.data(), vj.size());
        as_file("gpt2enc/merges.txt", (const uint8_t*)mt.data(), mt.size());
        return icl::GPT2Tokenizer::load(dir);
    }();
    const std::string s((const char*)data, size);
    if (tok.decode(tok.encode(s)) != s) std::abort();
    return 0;
}

int llmc(const uint8_t* data, size_t size) {
    const std::string p = as_file("model.bin", data, size);
    return refusal_ok([&] {
        const icl::GPTConfig c = icl::pretrained_config(p);
        if (c.num_params() > (1 << 20)) return;  // the header was validated against the file size; no need to allocate it
        icl::GPT<float> m(c, icl::Device::cpu, 1);
        icl::pretrained_load(m, p);
    });
}

int hf_config(const uint8_t* data, size_t size) {
    const std::string dir = scratch() + "/hf";
    std::filesystem::create_directories(dir);
    as_file("hf/config.json", data, size);
    return refusal_ok([&] { (void)icl::pretrained_config(dir); });
}

const std::vector<Named>& targets() {
    static const std::vector<Named> t = {{"checkpoint", checkpoint}, {"npy", npy}, {"csv", csv},
                                         {"index_json", index_json}, {"bpe", bpe}, {"cli", cli},
                                         {"gpt2_tokenizer", gpt2_tokenizer}, {"gpt2_encode", gpt2_encode}, {"llmc", llmc},
                                         {"hf_config", hf_config}};
    return t;
}

}  // namespace icl_fuzz
