// npy_compare.cpp — see npy_compare.h.
#include "engine/npy_compare.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/common.h"
#include "engine/compare.h"
#include "engine/fileio.h"
#include "engine/npy.h"

namespace icl {

namespace {

struct DirTensor {
    std::string name, file, kind;
};

struct DirListing {
    std::vector<DirTensor> tensors;  // in index order (or sorted by name)
    std::string info;                // "cuda, gpt, step 0" from index.json, "" without one
};

// index.json's kinds, shortened as in the gradcheck --compare table
std::string short_kind(const std::string& k) {
    if (k == "parameter") return "param";
    if (k == "activation") return "act";
    if (k == "parameter gradient") return "grad";
    if (k == "activation gradient") return "dact";
    return k.empty() ? "npy" : k;
}

DirListing list_dir(const std::string& dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) fail("npydiff: '" + dir + "' is not a directory");
    DirListing d;
    const std::string index = dir + "/index.json";
    if (fs::exists(index, ec)) {
        const std::string text = read_file(index, kMaxTextFileBytes, "index.json");  // no FIFO, at most 1 GiB
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(text);
        } catch (const std::exception& e) {
            fail("npydiff: " + index + ": not valid JSON (" + e.what() + ")");
        }
        if (!j.contains("tensors") || !j["tensors"].is_array()) fail("npydiff: " + index + ": no 'tensors' list");
        for (auto& t : j["tensors"]) {
            if (!t.contains("name") || !t["name"].is_string() || !t.contains("file") || !t["file"].is_string())
                fail("npydiff: " + index + ": a tensor entry without name/file");
            d.tensors.push_back({t["name"].get<std::string>(), dir + "/" + t["file"].get<std::string>(),
                                 short_kind(t.contains("kind") && t["kind"].is_string() ? t["kind"].get<std::string>() : std::string())});
        }
        auto str = [&](const char* k) { return j.contains(k) ? (j[k].is_string() ? j[k].get<std::string>() : j[k].dump()) : std::string("?"); };
        d.info = str("device") + ", " + str("model") + ", step " + str("step");
    } else {
        for (auto& e : fs::directory_iterator(dir, ec)) {
            const std::string fn = e.path().filename().string();
            if (e.is_regular_file() && fn.size() > 4 && fn.compare(fn.size() - 4, 4, ".npy") == 0)
                d.tensors.push_back({fn.substr(0, fn.size() - 4), e.path().string(), "npy"});
        }
        if (ec) fail("npydiff: cannot list '" + dir + "': " + ec.message());
        std::sort(d.tensors.begin(), d.tensors.end(), [](const DirTensor& a, const DirTensor& b) { return a.name < b.name; });
    }
    return d;
}

}  // namespace

NpyDiffResult npydiff_dirs(const std::string& dir_a, const std::string& dir_b, double atol, double rtol, std::FILE* out) {
    const DirListing A = list_dir(dir_a), B = list_dir(dir_b);
    std::map<std::string, const DirTensor*> in_b;
    for (auto& t : B.tensors) in_b[t.name] = &t;
    NpyDiffResult r;
    std::vector<TensorDiff> rows;
    std::map<std::string, bool> seen;
    for (auto& ta : A.tensors) {
        auto it = in_b.find(ta.name);
        if (it == in_b.end()) { r.missing.push_back(ta.name); continue; }
        seen[ta.name] = true;
        const NpyArray a = npy_load(ta.file), b = npy_load(it->second->file);
        if (a.shape != b.shape) {
            r.mismatched.push_back(ta.name + " " + shape_str(a.shape) + " vs " + shape_str(b.shape));
            continue;
        }
        const std::vector<double> va = a.to_double(), vb = b.to_double();
        rows.push_back(compare_tensor(ta.name, ta.kind, a.shape, va.data(), vb.data(), atol, rtol));
    }
    for (auto& tb : B.tensors)
        if (!seen.count(tb.name)) r.extra.push_back(tb.name);
    // the table (reference first), then whatever could not be compared
    std::string title = "npydiff: " + dir_a + (A.info.empty() ? "" : " (" + A.info + ")") + "  [reference]\n     vs  " + dir_b +
                        (B.info.empty() ? "" : " (" + B.info + ")");
    r.compared = (int)rows.size();
    r.failed = print_diff_table(out, title, rows, atol, rtol);
    auto list = [&](const char* what, const std::vector<std::string>& v) {
        if (v.empty()) return;
        std::fprintf(out, "%s (%zu):", what, v.size());
        for (auto& s : v) std::fprintf(out, "  %s", s.c_str());
        std::fprintf(out, "\n");
    };
    list("missing from B (only in A)", r.missing);
    list("extra in B (only in B)", r.extra);
    list("shape mismatch (A vs B)", r.mismatched);
    return r;
}

}  // namespace icl
