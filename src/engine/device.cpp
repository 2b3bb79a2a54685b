// device.cpp — CPU side of device.h; the CUDA side lives in cuda/cuda_device.cu (built by `make cuda`).
#include "engine/device.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "engine/common.h"
#ifdef ICL_CUDA
#include "cuda/layers.h"
#endif

namespace icl {

static bool g_tf32 = false;
void set_tf32(bool on) { g_tf32 = on; }
bool tf32_enabled() { return g_tf32; }
// ICL_FUSED_ATTENTION: 1 = on; unset, 0 or anything else = off here (check_device_environment refuses anything else)
static bool fused_attention_env(const char** bad = nullptr) {
    const char* e = std::getenv("ICL_FUSED_ATTENTION");
    if (bad) *bad = e && std::string(e) != "0" && std::string(e) != "1" ? e : nullptr;
    return e && std::string(e) == "1";
}
static bool g_fused_attention = fused_attention_env();
void set_fused_attention(bool on) { g_fused_attention = on; }
bool fused_attention_enabled() { return g_fused_attention; }
static int g_kattn_form = -1;  // -1: not yet read from ICL_KATTN_FORM
void set_kernel_attention_form(KattnForm f) { g_kattn_form = (int)f; }
KattnForm kernel_attention_form() {
    if (g_kattn_form < 0) {
        const char* e = std::getenv("ICL_KATTN_FORM");
        const std::string v = e ? e : "chunked";
        if (v == "chunked") g_kattn_form = (int)KattnForm::chunked;
        else if (v == "scan") g_kattn_form = (int)KattnForm::scan;
        else if (v == "scan-shared") g_kattn_form = (int)KattnForm::scan_shared;
        else fail("ICL_KATTN_FORM='" + v + "': expected chunked, scan or scan-shared", 2);
    }
    return (KattnForm)g_kattn_form;
}
void check_device_environment() {
    if (std::getenv("ICL_KATTN_FORM")) (void)kernel_attention_form();  // a bad value exits 2 here, not at the first GPU layer
    const char* bad = nullptr;
    fused_attention_env(&bad);
    if (bad) fail(std::string("ICL_FUSED_ATTENTION='") + bad + "': expected 0 or 1", 2);
}

#ifdef ICL_CUDA
// Implemented in cuda/cuda_device.cu.
void* cuda_alloc(size_t bytes);
void cuda_free(void* p);
void cuda_zero(void* p, size_t bytes);
void cuda_copy(void* dst, const void* src, size_t bytes, int kind);
void cuda_sync();
void cuda_require();
bool cuda_built() { return true; }
bool cuda_device_present() { return cuda_status().empty(); }
std::string device_description(Device d) { return d == Device::cpu ? "cpu" : "cuda: " + cuda::device_description(); }
#else
bool cuda_built() { return false; }
bool cuda_device_present() { return false; }
std::string cuda_status() { return "built without CUDA"; }
std::string device_description(Device d) { return d == Device::cpu ? "cpu" : "cuda (built without CUDA)"; }
[[noreturn]] static void no_cuda() {
    fail("--device cuda: this binary was built without CUDA (build with `make cuda` on a machine with nvcc)", 2);
}
#endif

Device parse_device(const std::string& s) {
    if (s == "cpu") return Device::cpu;
    if (s == "cuda" || s == "gpu") return Device::cuda;
    fail_usage("--device: expected cpu or cuda, got '" + s + "'");
}

void require_device(Device d) {
    if (d == Device::cpu) return;
#ifdef ICL_CUDA
    cuda_require();
#else
    no_cuda();
#endif
}

// MemAvailable of /proc/meminfo in bytes, or -1 where it cannot be read.
static double host_available_bytes() {
    std::FILE* f = std::fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    double kb = -1;
    while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "MemAvailable: %lf kB", &kb) == 1) break;
    std::fclose(f);
    return kb < 0 ? -1 : kb * 1024.0;
}

void check_host_memory(double bytes, const std::string& what) {
    if (bytes < (double)(64 << 20)) return;  // small requests: not worth reading /proc
    const double avail = host_available_bytes();
    if (avail >= 0 && bytes > avail)
        fail(strfmt("out of memory: %s need %.2f GiB, the machine has %.2f GiB available (reduce --batch, --seq or the model size)",
                    what.c_str(), bytes / 1073741824.0, avail / 1073741824.0));
}

// On the CPU a large buffer (a step's gradients: ~110 MB for bench model's GPT) is zeroed by all threads, one slice
// each: a throwaway timing on Zen 5 (111 MB just written, 2 threads) took 5.2-5.3 ms with one memset, 3.0-3.3 ms split.
static void cpu_zero(void* p, size_t bytes) {
    constexpr size_t kSplit = (size_t)4 << 20;  // below 4 MB one memset
#ifdef _OPENMP
    if (bytes >= kSplit && !omp_in_parallel() && omp_get_max_threads() > 1) {
        char* c = static_cast<char*>(p);
#pragma omp parallel
        {
            const size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
            const size_t a = bytes / nt * t, b = t + 1 == nt ? bytes : bytes / nt * (t + 1);
            std::memset(c + a, 0, b - a);
        }
        return;
    }
#endif
    std::memset(p, 0, bytes);
}

static std::atomic<uint64_t> g_alloc_count{0};
uint64_t device_alloc_count() { return g_alloc_count.load(); }

void* device_alloc(Device d, size_t bytes) {
    g_alloc_count++;
    if (bytes == 0) bytes = 64;
    if (d == Device::cpu) {
        check_host_memory((double)bytes, "one buffer would");
        size_t rounded = (bytes + 63) / 64 * 64;
        void* p = std::aligned_alloc(64, rounded);
        if (!p) fail(strfmt("out of host memory allocating %.1f MiB", bytes / 1048576.0));
        cpu_zero(p, rounded);
        return p;
    }
#ifdef ICL_CUDA
    return cuda_alloc(bytes);
#else
    no_cuda();
#endif
}

void device_free(Device d, void* p) {
    if (!p) return;
    if (d == Device::cpu) { std::free(p); return; }
#ifdef ICL_CUDA
    cuda_free(p);
#endif
}

void device_zero(Device d, void* p, size_t bytes) {
    if (d == Device::cpu) { cpu_zero(p, bytes); return; }
#ifdef ICL_CUDA
    cuda_zero(p, bytes);
#else
    no_cuda();
#endif
}

void device_copy(Device d, void* dst, const void* src, size_t bytes, Copy kind) {
    if (d == Device::cpu) { std::memmove(dst, src, bytes); return; }
#ifdef ICL_CUDA
    cuda_copy(dst, src, bytes, (int)kind);
#else
    (void)kind;
    no_cuda();
#endif
}

void device_sync(Device d) {
#ifdef ICL_CUDA
    if (d == Device::cuda) cuda_sync();
#else
    (void)d;
#endif
}

}  // namespace icl
