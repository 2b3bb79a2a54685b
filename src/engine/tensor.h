// tensor.h — shapes, named tensor tables, and one-allocation buffers with named views.
//
// The parameter registry of DESIGN.md is a TensorTable: each model lists its tensors ONCE as
// (name, shape, init, doc). The same table then drives
//   * one flat allocation each for params, grads, AdamW m and v  (llm.c's ParameterTensors idea),
//   * checkpoint save/load (src/engine/checkpoint.h), .npy dumps, and the order of gradient comparisons.
// Activations use a TensorTable too (init = none), so every named activation can be dumped by name.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/common.h"

namespace icl {

using Shape = std::vector<int64_t>;

// The element count. A zero dimension makes it 0 whatever the others hold, before any product that could overflow
// (a file's shape (5, 18, 53, 10^16, 0) is an empty array); readers bound non-empty shapes before calling this.
inline int64_t numel(const Shape& s) {
    for (auto d : s)
        if (d == 0) return 0;
    int64_t n = 1;
    for (auto d : s) n *= d;
    return n;
}
inline std::string shape_str(const Shape& s) {  // "(4,16,32)"
    std::string r = "(";
    for (size_t i = 0; i < s.size(); i++) r += (i ? "," : "") + std::to_string(s[i]);
    return r + (s.size() == 1 ? ",)" : ")");
}

// How a parameter is initialised.
enum class Init { none, zeros, ones, normal };

struct TensorSpec {
    std::string name;
    Shape shape;
    Init init = Init::none;
    float std = 0.0f;  // for Init::normal
    std::string doc;   // one line for index.json / --help of dumps
    bool decay = true; // AdamW weight decay applies (off for biases, LN gains, embeddings of positions…)
    int64_t numel() const { return icl::numel(shape); }
};

// An ordered list of named tensors laid out back to back in one buffer (64-byte aligned offsets).
struct TensorTable {
    std::vector<TensorSpec> specs;
    std::vector<size_t> offsets;  // in elements
    size_t total = 0;             // elements, including alignment padding
    std::unordered_map<std::string, size_t> index;
    size_t aliases = 0;           // tensors added by alias(): views of another's memory

    // Append a tensor; returns its position. Names must be unique.
    size_t add(TensorSpec spec) {
        if (index.count(spec.name)) fail("tensor '" + spec.name + "' listed twice");
        for (auto d : spec.shape) ICL_ASSERT_MSG(d > 0, spec.name);
        size_t pos = specs.size();
        total = (total + 15) / 16 * 16;  // 16 elements = 64 bytes for fp32
        offsets.push_back(total);
        total += (size_t)spec.numel();
        index[spec.name] = pos;
        specs.push_back(std::move(spec));
        return pos;
    }
    // Append a tensor that shares the memory of an earlier one (`same_as`, at least as large): a view, not a copy.
    // For buffers whose tensors are never alive together, or always equal (models/block.h: share_block_gradients).
    size_t alias(TensorSpec spec, const std::string& same_as) {
        if (index.count(spec.name)) fail("tensor '" + spec.name + "' listed twice");
        const size_t target = find(same_as);
        ICL_ASSERT_MSG(spec.numel() <= specs[target].numel(), spec.name + " does not fit in " + same_as);
        size_t pos = specs.size();
        offsets.push_back(offsets[target]);
        index[spec.name] = pos;
        aliases++;
        specs.push_back(std::move(spec));
        return pos;
    }
    bool has(const std::string& name) const { return index.count(name) != 0; }
    size_t find(const std::string& name) const {
        auto it = index.find(name);
        if (it == index.end()) fail("no tensor named '" + name + "'");
        return it->second;
    }
    const TensorSpec& spec(const std::string& name) const { return specs[find(name)]; }
    size_t offset(const std::string& name) const { return offsets[find(name)]; }
    size_t size() const { return specs.size(); }
    // Total number of elements of the tensors themselves (no padding): the parameter count.
    int64_t count() const {
        int64_t n = 0;
        for (auto& s : specs) n += s.numel();
        return n;
    }
};

}  // namespace icl
