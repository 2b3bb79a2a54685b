// compare.h — tensor-by-tensor comparison tables: finite differences vs backward, CPU vs GPU, and two
// --dump-npy directories (tools/npydiff). One format everywhere:
//
//   tensor                 shape        max |Δ|     max |Δ|/(atol+rtol·|ref|)   RMS rel    ok
//   h.0.attn.qkv.w         (24,8)       3.1e-11     0.031                       2.2e-10    ✓
//
// A tensor passes when max |a−ref| / (atol + rtol·|ref|) ≤ 1, element by element.
// RMS rel = sqrt(Σ (a−ref)² / Σ ref²) (0 when both are all zero).
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace icl {

struct TensorDiff {
    std::string name, kind;  // kind: "param", "grad", "activation", … (free text, shown in the table)
    Shape shape;
    double max_abs = 0, max_scaled = 0, rms_rel = 0;
    int64_t worst = -1;      // flat index of the worst element (by the scaled error)
    double worst_ref = 0, worst_got = 0;
    int64_t nonfinite = 0;   // elements where either side is NaN/Inf (a failure)
    bool pass = true;
};

TensorDiff compare_tensor(const std::string& name, const std::string& kind, const Shape& shape, const double* ref,
                          const double* got, double atol, double rtol);

// Print the table (with a header naming what is compared and the tolerances) and a one-line verdict.
// Returns the number of failing tensors.
int print_diff_table(std::FILE* f, const std::string& title, const std::vector<TensorDiff>& rows, double atol, double rtol);

}  // namespace icl
