// safetensors.h — the .safetensors file format (github.com/huggingface/safetensors), written and read
// without the Python package, so checkpoints open directly in safetensors / NumPy / PyTorch.
//
// Layout:
//   N        8 bytes, u64 little-endian: length of the JSON header
//   HEADER   N bytes of JSON, padded with spaces to a multiple of 8 (so the data starts 8-byte aligned):
//            {"__metadata__": {"key": "value", ...},
//             "name": {"dtype": "F32", "shape": [8, 5], "data_offsets": [BEGIN, END]}, ...}
//   DATA     raw little-endian C-order tensor bytes. Offsets are relative to the start of DATA; the
//            tensors tile DATA exactly: contiguous, no holes, no overlaps, END - BEGIN = numel * dtype size.
//
// Written dtypes: "F32" (float), "F64" (double), "I32" (int32_t). Read besides: "F16" and "BF16" (as saved by
// PyTorch; converted to float or double on read), and "I64", "I16", "I8", "U8", "BOOL" (validated in the header,
// e.g. Hugging Face's attention-mask buffers, but never read). Metadata is string -> string only.
//
// The writer is atomic (temporary file + rename; see engine/fileio.h): if it fails, the file
// previously at `path` is intact. Entries are written in the given order, except that 8-byte dtypes go
// before 4-byte ones (as the reference writer does) so every tensor is naturally aligned in the file.
//
// The reader validates the whole header against the file size up front and refuses, with a one-line
// icl::Error naming the file, anything that does not follow the rules above. read() then refuses a
// missing tensor, a shape other than the expected one, and a dtype it cannot convert:
//     F32 <-> F64   converted on read (float checkpoint into a double model and back)
//     F16, BF16     into float or double (exactly: every half and bfloat16 value is a float)
//     I32           only into int32_t;  floating point never into int32_t; the other integer dtypes never read.
#pragma once
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/fileio.h"
#include "engine/tensor.h"

namespace icl {

enum class StDtype { F32, F64, I32, F16, BF16, I64, I16, I8, U8, BOOL };
const char* st_dtype_name(StDtype d);  // "F32", "F64", "I32", …
size_t st_dtype_size(StDtype d);       // 4, 8, 4, 2, 2, 8, 2, 1, 1, 1
bool st_dtype_is_float(StDtype d);     // F32, F64, F16, BF16: readable into float and double
// IEEE half and bfloat16 bits -> float (exact).
float half_to_float(uint16_t h);
float bfloat16_to_float(uint16_t b);

// One tensor to write: its data (numel(shape) elements of dtype, C order) stays owned by the caller.
struct StEntry {
    std::string name;
    Shape shape;
    StDtype dtype;
    const void* data;
    StEntry(std::string n, Shape s, const float* p) : name(std::move(n)), shape(std::move(s)), dtype(StDtype::F32), data(p) {}
    StEntry(std::string n, Shape s, const double* p) : name(std::move(n)), shape(std::move(s)), dtype(StDtype::F64), data(p) {}
    StEntry(std::string n, Shape s, const int32_t* p) : name(std::move(n)), shape(std::move(s)), dtype(StDtype::I32), data(p) {}
};

// Write `entries` and `metadata` to `path` atomically. Names must be unique, non-empty and not
// "__metadata__" (an internal error otherwise).
void safetensors_save(const std::string& path, const std::vector<StEntry>& entries,
                      const std::map<std::string, std::string>& metadata = {});

// What the header says about one tensor.
struct StTensorInfo {
    std::string name;
    StDtype dtype;
    Shape shape;
    uint64_t begin, end;  // byte offsets relative to the start of the data section
};

// An opened, fully validated .safetensors file. Holds the file open (copies share the handle), so a
// file renamed over it by a concurrent save does not change what this object reads.
class SafetensorsFile {
  public:
    const std::string& path() const { return path_; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    // Tensor names in file (offset) order.
    std::vector<std::string> names() const;
    bool has(const std::string& name) const { return index_.count(name) != 0; }
    // Header entry of a tensor; throws icl::Error if there is none.
    const StTensorInfo& info(const std::string& name) const;

    // Read tensor `name` into dst (numel(expected) elements), checking shape and dtype (see top of file).
    void read(const std::string& name, const Shape& expected, float* dst) const;
    void read(const std::string& name, const Shape& expected, double* dst) const;
    void read(const std::string& name, const Shape& expected, int32_t* dst) const;

  private:
    friend SafetensorsFile safetensors_open(const std::string& path);
    void read_bytes(const StTensorInfo& t, void* dst) const;
    const StTensorInfo& checked(const std::string& name, const Shape& expected) const;

    std::string path_;
    std::shared_ptr<FileFd> file_;
    uint64_t data_start_ = 0;
    std::vector<StTensorInfo> tensors_;  // in offset order
    std::map<std::string, size_t> index_;
    std::map<std::string, std::string> metadata_;
};

SafetensorsFile safetensors_open(const std::string& path);

}  // namespace icl
