// provenance.cpp — see provenance.h. ICL_GIT_COMMIT, ICL_GIT_DIRTY and ICL_BUILD_FLAGS come from the build
// (Makefile / CMakeLists.txt compile this one file with them).
#include "engine/provenance.h"

#include <cstdlib>
#include <ctime>
#include <fstream>

#include "engine/common.h"
#include "engine/run.h"

#ifndef ICL_GIT_COMMIT
#define ICL_GIT_COMMIT "unknown"
#endif
#ifndef ICL_GIT_DIRTY
#define ICL_GIT_DIRTY 0
#endif
#ifndef ICL_BUILD_FLAGS
#define ICL_BUILD_FLAGS ""
#endif

namespace icl {

std::string build_commit() { return std::string(ICL_GIT_COMMIT) + (ICL_GIT_DIRTY ? "+dirty" : ""); }

std::string build_compiler() {
#if defined(__clang__)
    std::string c = "clang++ " __clang_version__;
#elif defined(__GNUC__)
    std::string c = strfmt("g++ %d.%d.%d", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
#else
    std::string c = "unknown compiler";
#endif
    // the build's own flags, then the one both build systems always add that changes results (Makefile, CMakeLists.txt)
    const std::string flags = ICL_BUILD_FLAGS;
    return (flags.empty() ? c : c + " " + flags) + " -ffp-contract=off";
}

// The microarchitecture of the machines this project meets, from /proc/cpuinfo's vendor, family and model: on some
// VMs the model name alone says "AMD EPYC", which cannot tell a Zen 4 from a Zen 5. Empty when not known.
static std::string microarch(const std::string& vendor, int family, int model) {
    if (vendor == "AuthenticAMD") {
        if (family == 0x17) return model >= 0x30 ? "Zen 2" : "Zen / Zen+";
        if (family == 0x19) {
            const bool zen4 = (model >= 0x10 && model <= 0x1f) || (model >= 0x60 && model <= 0x7f) || (model >= 0xa0 && model <= 0xaf);
            return zen4 ? "Zen 4" : "Zen 3";
        }
        if (family == 0x1a) return "Zen 5";
    }
    if (vendor == "GenuineIntel" && family == 6) {
        switch (model) {
            case 0x55: return "Skylake-SP / Cascade Lake";
            case 0x6a: case 0x6c: return "Ice Lake-SP";
            case 0x8f: return "Sapphire Rapids";
            case 0xcf: return "Emerald Rapids";
            case 0xad: case 0xae: return "Granite Rapids";
        }
    }
    return "";
}

std::string cpu_model() {
    std::ifstream f("/proc/cpuinfo");
    std::string line, name, vendor;
    int family = -1, model = -1;
    auto value = [&](const std::string& l) {
        const size_t k = l.find(':');
        if (k == std::string::npos) return std::string();
        const size_t v = l.find_first_not_of(" \t", k + 1);
        return v == std::string::npos ? std::string() : l.substr(v);
    };
    while (std::getline(f, line) && !line.empty()) {  // the first processor's block
        if (line.rfind("model name", 0) == 0) name = value(line);
        else if (line.rfind("vendor_id", 0) == 0) vendor = value(line);
        else if (line.rfind("cpu family", 0) == 0) family = std::atoi(value(line).c_str());
        else if (line.rfind("model", 0) == 0 && line.find_first_of(" \t") == 5) model = std::atoi(value(line).c_str());
    }
    if (name.empty()) return "unknown CPU";
    if (family < 0 || model < 0) return name;
    const std::string arch = microarch(vendor, family, model);
    return strfmt("%s (%s%sfamily %d model %d)", name.c_str(), arch.c_str(), arch.empty() ? "" : ", ", family, model);
}

std::string isa_path() {
#if defined(__AVX512F__)
    return "avx512";
#elif defined(__AVX2__) && defined(__FMA__)
    return "avx2";
#else
    return "generic";
#endif
}

static RunRecord g_record;
void set_run_record(const RunRecord& r) { g_record = r; }
const RunRecord& run_record() { return g_record; }

static std::string utc_now() {
    const std::time_t t = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return buf;
}

nlohmann::json provenance_json() {
    const RunRecord& r = run_record();
    nlohmann::json j = {{"commit", build_commit()}, {"compiler", build_compiler()}, {"cpu", cpu_model()}, {"isa", isa_path()},
                        {"threads", r.threads},     {"device", device_description(r.dev)}, {"date", utc_now()}};
    if (r.seed >= 0) {
        j["seed"] = r.seed;
        j["seeds"] = r.seeds;
    }
    return j;
}

std::string provenance_line() {
    const RunRecord& r = run_record();
    const std::string seeds = r.seed < 0 ? "no seed" : r.seeds > 1 ? strfmt("seed %lld, %d seeds", (long long)r.seed, r.seeds)
                                                                   : strfmt("seed %lld", (long long)r.seed);
    return strfmt("icl.cpp %s, %s, %s (%s), %d threads, %s, %s, %s", build_commit().c_str(), build_compiler().c_str(), cpu_model().c_str(),
                  isa_path().c_str(), r.threads, device_description(r.dev).c_str(), seeds.c_str(), utc_now().c_str());
}

std::string csv_provenance_comment() { return "# " + provenance_line() + "\n"; }

void write_run_summary(const std::string& path, nlohmann::json j) {
    j["provenance"] = provenance_json();
    write_json(path, j);
}

}  // namespace icl
