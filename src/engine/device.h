// device.h — where tensors live: the CPU or a CUDA GPU.
//
// Models hold a Device and get every buffer from device_alloc(); layer calls go through the thin
// dispatch in src/layers/dispatch.h. A build without nvcc (ICL_CUDA undefined) still links: asking for
// the GPU fails with "built without CUDA" instead of crashing.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/common.h"

namespace icl {

enum class Device { cpu, cuda };

inline const char* device_name(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }
Device parse_device(const std::string& s);  // "cpu" | "cuda"; bad value -> usage error

bool cuda_built();                    // compiled with nvcc?
bool cuda_device_present();           // built with CUDA and a GPU is visible (never fails; tests use it to skip)
std::string cuda_status();            // why no GPU can be used, in one line ("" when one can)
void require_device(Device d);        // fails with a clear message if d cannot be used here
std::string device_description(Device d);  // "cpu" or e.g. "cuda: NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)"

// --tf32: let the CUDA matmuls use TF32 tensor cores (10-bit mantissa products, fp32 accumulation; ~1e-3
// relative error). Off by default, and always off in CPU-vs-GPU comparisons. No effect on the CPU.
void set_tf32(bool on);
bool tf32_enabled();
// The causal softmax attention's O(T) form on the GPU as one fused online-softmax kernel (cuda/attention_fused.cu: no
// T×T buffer) instead of cuBLAS products through device scratch. Off by default: measured 3.75× slower than the cuBLAS
// form on an H200 (docs/benchmarks.md); ICL_FUSED_ATTENTION=1 in the environment turns it on. No effect on the CPU.
void set_fused_attention(bool on);
bool fused_attention_enabled();
// How the GPU runs kernel attention (cuda/kernel_attention.cu): `chunked` (the default) — chunks of 32 tokens in
// parallel, joined by a prefix over the chunks' states — or the token-by-token scan, one thread block per (batch, head),
// with its (m,hs) state in a global slice (`scan`) or in shared memory (`scan_shared`). ICL_KATTN_FORM=chunked, scan or
// scan-shared in the environment picks one (anything else: a one-line error, exit 2). No effect on the CPU.
enum class KattnForm { chunked, scan, scan_shared };
void set_kernel_attention_form(KattnForm f);
KattnForm kernel_attention_form();
// Checks the two variables above (ICL_KATTN_FORM, ICL_FUSED_ATTENTION) wherever they are set, on any device, so that a
// misspelt value exits 2 with one line at startup (apply_run_flags), not when the GPU first reaches the layer.
void check_device_environment();

void* device_alloc(Device d, size_t bytes);  // zero-filled, 64-byte aligned on the CPU
// How many device_alloc calls this process has made (both devices): tests check that a steady loop allocates nothing.
uint64_t device_alloc_count();
// Refuse (icl::Error, one line with both sizes) `bytes` more of host memory when the machine has less available
// (MemAvailable): an oversized configuration fails up front instead of in the OOM killer. `what` names it.
void check_host_memory(double bytes, const std::string& what);
void device_free(Device d, void* p);
void device_zero(Device d, void* p, size_t bytes);
enum class Copy { host_to_device, device_to_host, device_to_device };
void device_copy(Device d, void* dst, const void* src, size_t bytes, Copy kind);
void device_sync(Device d);

// An owning, typed device buffer (movable, not copyable).
template <typename real>
struct Buffer {
    Device dev = Device::cpu;
    real* ptr = nullptr;
    size_t n = 0;
    Buffer() = default;
    Buffer(Device d, size_t count) : dev(d), ptr((real*)device_alloc(d, bytes_of(count))), n(count) {}
    static size_t bytes_of(size_t count) {  // count · sizeof(real), refused rather than wrapped around
        if (count > (SIZE_MAX >> 1) / sizeof(real)) fail("a buffer of " + std::to_string(count) + " elements is beyond any memory");
        return count * sizeof(real);
    }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    Buffer(Buffer&& o) noexcept { *this = std::move(o); }
    Buffer& operator=(Buffer&& o) noexcept {
        if (this != &o) { release(); dev = o.dev; ptr = o.ptr; n = o.n; o.ptr = nullptr; o.n = 0; }
        return *this;
    }
    ~Buffer() { release(); }
    void release() { if (ptr) device_free(dev, ptr); ptr = nullptr; n = 0; }
    void zero() { if (ptr) device_zero(dev, ptr, n * sizeof(real)); }
    size_t bytes() const { return n * sizeof(real); }
};

// Grow-only scratch: (re)allocate b for at least n elements on dev when it is smaller (contents not kept).
template <typename real>
void ensure_size(Buffer<real>& b, Device dev, size_t n) {
    if (b.n < n || b.dev != dev) b = Buffer<real>(dev, n);
}

}  // namespace icl
