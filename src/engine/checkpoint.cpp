// checkpoint.cpp — save/load of a TensorTable's parameters as .safetensors (see checkpoint.h).
#include "engine/checkpoint.h"

#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "engine/safetensors.h"

namespace icl {

using ojson = nlohmann::ordered_json;

int config_int(const nlohmann::json& j, const char* key, const char* model, int64_t lo, int64_t hi) {
    if (!j.is_object() || !j.contains(key)) fail(strfmt("%s config: missing '%s'", model, key));
    const nlohmann::json& v = j[key];
    if (!v.is_number_integer()) fail(strfmt("%s config: '%s' is not an integer", model, key));
    const bool neg = v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0;
    if (!neg && v.is_number_unsigned() && v.get<uint64_t>() > (uint64_t)hi)
        fail(strfmt("%s config: '%s' = %llu is outside [%lld, %lld]", model, key, (unsigned long long)v.get<uint64_t>(), (long long)lo, (long long)hi));
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) fail(strfmt("%s config: '%s' = %lld is outside [%lld, %lld]", model, key, (long long)x, (long long)lo, (long long)hi));
    return (int)x;
}

static std::string short_dump(const ojson& v) {
    std::string s = v.dump();
    return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// First difference between two JSON values, or "". Keys are visited in the current config's order,
// then keys only the saved one has.
static std::string json_difference(const ojson& saved, const ojson& cur, const std::string& where) {
    if (saved.is_object() && cur.is_object()) {
        for (auto it = cur.begin(); it != cur.end(); ++it) {
            std::string key = where.empty() ? it.key() : where + "." + it.key();
            if (!saved.contains(it.key()))
                return strfmt("'%s' is missing in the checkpoint, %s in this run", key.c_str(), short_dump(it.value()).c_str());
            std::string d = json_difference(saved[it.key()], it.value(), key);
            if (!d.empty()) return d;
        }
        for (auto it = saved.begin(); it != saved.end(); ++it)
            if (!cur.contains(it.key())) {
                std::string key = where.empty() ? it.key() : where + "." + it.key();
                return strfmt("'%s': %s in the checkpoint, missing in this run", key.c_str(), short_dump(it.value()).c_str());
            }
        return "";
    }
    if (saved == cur) return "";
    return strfmt("'%s': %s in the checkpoint, %s in this run", where.empty() ? "(whole config)" : where.c_str(),
                  short_dump(saved).c_str(), short_dump(cur).c_str());
}

std::string config_difference(const std::string& saved_json, const std::string& current_json) {
    ojson a, b;
    try {
        a = ojson::parse(saved_json);
    } catch (const nlohmann::json::exception&) {
        fail("checkpoint config is not valid JSON");
    }
    try {
        b = ojson::parse(current_json);
    } catch (const nlohmann::json::exception&) {
        fail("model config is not valid JSON");
    }
    return json_difference(a, b, "");
}

// The icl.cpp-level checks on an opened file's metadata.
static CheckpointInfo checkpoint_info(const SafetensorsFile& f) {
    const std::string& path = f.path();
    const auto& md = f.metadata();
    auto get = [&](const char* key) -> const std::string* {
        auto it = md.find(key);
        return it == md.end() ? nullptr : &it->second;
    };
    const std::string* format = get("format");
    if (!format || *format != "icl.cpp")
        fail(strfmt("checkpoint %s: not an icl.cpp checkpoint (its __metadata__ has no \"format\": \"icl.cpp\")", path.c_str()));
    const std::string* version = get("format_version");
    if (!version || *version != kCheckpointFormatVersion)
        fail(strfmt("checkpoint %s: format version '%s' is not supported (this build reads version %s)", path.c_str(),
                    version ? version->c_str() : "(none)", kCheckpointFormatVersion));
    for (const char* key : {"model", "config"})
        if (!get(key)) fail(strfmt("checkpoint %s: malformed icl.cpp checkpoint: no '%s' in its metadata", path.c_str(), key));
    CheckpointInfo ci;
    ci.path = path;
    ci.model = *get("model");
    ci.config = *get("config");
    ci.format_version = *version;
    ci.metadata = md;
    return ci;
}

nlohmann::json checkpoint_config_json(const CheckpointInfo& ci) {
    try {
        return nlohmann::json::parse(ci.config);
    } catch (const nlohmann::json::exception& e) {
        fail("checkpoint " + ci.path + ": its config is not valid JSON (" + e.what() + ")");
    }
}

CheckpointInfo read_checkpoint_metadata(const std::string& path) { return checkpoint_info(safetensors_open(path)); }

template <class real>
void save_checkpoint(const std::string& path, const std::string& model_kind, const std::string& config_json,
                     const TensorTable& table, const real* params, const std::map<std::string, std::string>& extra,
                     const std::vector<std::pair<std::string, const real*>>& companions) {
    ICL_ASSERT_MSG(ojson::accept(config_json), "config is not valid JSON: " + config_json);
    std::map<std::string, std::string> md = extra;
    for (const char* key : {"format", "format_version", "model", "config"})
        ICL_ASSERT_MSG(!extra.count(key), std::string("extra checkpoint metadata may not set '") + key + "'");
    md["format"] = "icl.cpp";
    md["format_version"] = kCheckpointFormatVersion;
    md["model"] = model_kind;
    md["config"] = config_json;
    std::vector<StEntry> entries;
    entries.reserve(table.size());
    for (size_t i = 0; i < table.size(); i++)
        entries.emplace_back(table.specs[i].name, table.specs[i].shape, params + table.offsets[i]);
    for (const auto& c : companions) {
        ICL_ASSERT_MSG(c.first.rfind(kOptimizerPrefix, 0) == 0, "companion prefix outside " + std::string(kOptimizerPrefix) + ": " + c.first);
        for (size_t i = 0; i < table.size(); i++)
            entries.emplace_back(c.first + table.specs[i].name, table.specs[i].shape, c.second + table.offsets[i]);
    }
    safetensors_save(path, entries, md);
}

template <class real>
void load_checkpoint(const std::string& path, const std::string& model_kind, const std::string& config_json,
                     const TensorTable& table, real* params) {
    SafetensorsFile f = safetensors_open(path);
    CheckpointInfo ci = checkpoint_info(f);
    if (ci.model != model_kind)
        fail(strfmt("checkpoint %s holds a '%s' model, this run builds '%s'", path.c_str(), ci.model.c_str(), model_kind.c_str()));
    std::string diff;
    try {
        diff = config_difference(ci.config, config_json);
    } catch (const Error& e) {
        fail(strfmt("checkpoint %s: %s", path.c_str(), e.what()));
    }
    if (!diff.empty()) fail(strfmt("checkpoint %s: config differs at %s", path.c_str(), diff.c_str()));

    // Every tensor present with the right shape and a float dtype, and nothing else, before reading any.
    for (const TensorSpec& s : table.specs) {
        if (!f.has(s.name))
            fail(strfmt("checkpoint %s: tensor '%s' %s is missing", path.c_str(), s.name.c_str(), shape_str(s.shape).c_str()));
        const StTensorInfo& t = f.info(s.name);
        if (t.shape != s.shape)
            fail(strfmt("checkpoint %s: tensor '%s' has shape %s, model expects %s", path.c_str(), s.name.c_str(),
                        shape_str(t.shape).c_str(), shape_str(s.shape).c_str()));
        if (!st_dtype_is_float(t.dtype))
            fail(strfmt("checkpoint %s: tensor '%s' has dtype %s, model expects floating point", path.c_str(), s.name.c_str(), st_dtype_name(t.dtype)));
    }
    for (const std::string& name : f.names())
        if (!table.has(name) && name.rfind(kOptimizerPrefix, 0) != 0)
            fail(strfmt("checkpoint %s: tensor '%s' is not part of this '%s' model", path.c_str(), name.c_str(), model_kind.c_str()));
    for (size_t i = 0; i < table.size(); i++) f.read(table.specs[i].name, table.specs[i].shape, params + table.offsets[i]);
}

template <class real>
void load_checkpoint_companions(const std::string& path, const TensorTable& table, const std::vector<std::pair<std::string, real*>>& outs) {
    SafetensorsFile f = safetensors_open(path);
    for (const auto& o : outs)
        for (const TensorSpec& s : table.specs) {
            const std::string name = o.first + s.name;
            if (!f.has(name))
                fail(strfmt("checkpoint %s: not resumable (no optimizer state '%s'): resume from a <run>/checkpoint-<step>.safetensors "
                            "written by --save-every, or start from its weights with --load",
                            path.c_str(), name.c_str()));
            const StTensorInfo& t = f.info(name);
            if (t.shape != s.shape || !st_dtype_is_float(t.dtype))
                fail(strfmt("checkpoint %s: optimizer state '%s' has shape %s, expected %s", path.c_str(), name.c_str(),
                            shape_str(t.shape).c_str(), shape_str(s.shape).c_str()));
        }
    for (const auto& o : outs)
        for (size_t i = 0; i < table.size(); i++) f.read(o.first + table.specs[i].name, table.specs[i].shape, o.second + table.offsets[i]);
}

template void save_checkpoint<float>(const std::string&, const std::string&, const std::string&, const TensorTable&,
                                     const float*, const std::map<std::string, std::string>&,
                                     const std::vector<std::pair<std::string, const float*>>&);
template void save_checkpoint<double>(const std::string&, const std::string&, const std::string&, const TensorTable&,
                                      const double*, const std::map<std::string, std::string>&,
                                      const std::vector<std::pair<std::string, const double*>>&);
template void load_checkpoint_companions<float>(const std::string&, const TensorTable&, const std::vector<std::pair<std::string, float*>>&);
template void load_checkpoint_companions<double>(const std::string&, const TensorTable&, const std::vector<std::pair<std::string, double*>>&);
template void load_checkpoint<float>(const std::string&, const std::string&, const std::string&, const TensorTable&, float*);
template void load_checkpoint<double>(const std::string&, const std::string&, const std::string&, const TensorTable&, double*);

}  // namespace icl
