// npy.h — NumPy .npy files (format 1.0), written and read without NumPy.
//
// What a .npy file is (numpy/lib/format.py documents it):
//
//   "\x93NUMPY"  major minor  HEADER_LEN (u16 little-endian; u32 for version 2.0)  HEADER  DATA
//
// HEADER is a Python dict literal, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
// padded with spaces and ended by '\n' so that magic + version + length + header is a multiple of 64
// bytes (the data then starts 64-byte aligned). DATA is the raw array in C (row-major) order.
// Our headers are byte-identical to those of np.save in NumPy >= 1.23 (which also reserves room for the
// first axis to grow to 21 digits); older NumPy versions read them as well.
//
// This engine writes and reads exactly three dtypes, all little-endian, C order:
//     "<f4" (float)   "<f8" (double)   "<i4" (int32_t)
// Shapes: () is a scalar (1 element), (n,) is 1-D, (a, b, ...) otherwise. Zero-sized dims are allowed.
//
// Writing is atomic (engine/fileio.h): an interrupted or failed write never destroys an earlier file. Any
// write error (no such directory, disk full, ...) throws icl::Error naming the path.
//
// Reading validates everything before trusting it and throws a one-line icl::Error naming the file and
// the problem: bad magic, unsupported version, header past end of file, unparsable header dict, unsupported
// dtype ('>f4', '<f2', '|b1', ...), fortran_order True, bad shape, or a data size that does not match the
// shape (truncated file or trailing bytes). The shape is checked against the file size before any
// allocation. Versions 1.0, 2.0 and 3.0 are read (they differ only in the header length field / encoding).
//
//   icl::npy_save("out/w.npy", w, {C, 3 * C});
//   icl::NpyArray a = icl::npy_load("out/w.npy");   // a.descr == "<f4", a.shape == {C, 3*C}
//   std::vector<float> v = a.as<float>();            // exact dtype required; a.to_double() converts any
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/fileio.h"
#include "engine/tensor.h"

namespace icl {

// ---- writing ------------------------------------------------------------------------------------------

// Write numel(shape) elements from `data` (C order) as <path>. shape {} writes a 0-d scalar.
void npy_save(const std::string& path, const float* data, const Shape& shape);
void npy_save(const std::string& path, const double* data, const Shape& shape);
void npy_save(const std::string& path, const int32_t* data, const Shape& shape);

// The complete header (magic, version, length, padded dict) NumPy would write for this dtype and shape.
// descr must be "<f4", "<f8" or "<i4". Exposed for tests and for writers that stream their data.
std::string npy_header(const std::string& descr, const Shape& shape);

// ---- reading ------------------------------------------------------------------------------------------

struct NpyArray {
    std::string descr;                 // "<f4", "<f8" or "<i4"
    Shape shape;                       // {} for a scalar
    std::vector<unsigned char> bytes;  // numel * itemsize raw little-endian bytes, C order

    int64_t size() const { return numel(shape); }  // number of elements
    size_t itemsize() const { return descr == "<f8" ? 8 : 4; }

    // The elements as T, which must match the dtype exactly (float <-> "<f4", double <-> "<f8",
    // int32_t <-> "<i4"); anything else throws icl::Error naming both dtypes.
    template <class T> std::vector<T> as() const {
        check_dtype(dtype_of<T>());
        std::vector<T> out((size_t)size());
        if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
        return out;
    }
    // The elements converted to double, whatever the dtype (exact for all three).
    std::vector<double> to_double() const;

  private:
    template <class T> static const char* dtype_of();
    void check_dtype(const char* want) const;
};
template <> inline const char* NpyArray::dtype_of<float>() { return "<f4"; }
template <> inline const char* NpyArray::dtype_of<double>() { return "<f8"; }
template <> inline const char* NpyArray::dtype_of<int32_t>() { return "<i4"; }

NpyArray npy_load(const std::string& path);

}  // namespace icl
