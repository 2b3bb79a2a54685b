// npy_compare.h — compare two --dump-npy directories tensor by tensor (e.g. a CPU run and a GPU run of the same
// step), with the comparison table of engine/compare.h. tools/npydiff is the command-line front end.
//
// The tensors of a directory are those listed in its index.json (name, file, kind), or, without an index, every
// *.npy file in it (name = file name without .npy). DIR_A is the reference. Reported:
//   * a table row per tensor present in both with the same shape (any of <f4, <f8, <i4: compared as doubles);
//   * tensors only in A ("missing from B"), only in B ("extra in B"), and tensors whose shapes differ.
// The comparison passes only if every row is within tolerance and nothing is missing, extra or mis-shaped.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

namespace icl {

struct NpyDiffResult {
    int compared = 0, failed = 0;
    std::vector<std::string> missing, extra, mismatched;  // mismatched: "name (2,3) vs (3,2)"
    bool ok() const { return failed == 0 && missing.empty() && extra.empty() && mismatched.empty(); }
};

// Prints the table and the lists to `out`. Throws icl::Error if a directory cannot be read or a file is malformed.
NpyDiffResult npydiff_dirs(const std::string& dir_a, const std::string& dir_b, double atol, double rtol, std::FILE* out);

}  // namespace icl
