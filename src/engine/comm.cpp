// comm.cpp — see comm.h. MPI only when built with ICL_MPI (mpicxx found, or `make mpi`).
#include "engine/comm.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/common.h"

#ifdef ICL_CUDA
#include "cuda/layers.h"
#endif

#ifdef ICL_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only (OpenMPI's C++ bindings are deprecated and warn)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace icl {

static Comm g_comm;
static int g_err_fd = 2;

const Comm& comm() { return g_comm; }
int comm_error_fd() { return g_err_fd; }
bool comm_built_with_mpi() {
#ifdef ICL_MPI
    return true;
#else
    return false;
#endif
}

// The world size an MPI launcher announces in the environment (OpenMPI, MPICH / Hydra, PMIx); 0 = not launched.
static int launcher_size(std::string& var) {
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"}) {
        const char* s = std::getenv(v);
        if (s && *s) {
            var = v;
            return std::max(1, std::atoi(s));
        }
    }
    return 0;
}

void comm_init(int* argc, char*** argv) {
    std::string var;
    const int n = launcher_size(var);
#ifdef ICL_MPI
    if (n == 0) return;  // not started by a launcher: one process, no MPI_Init
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) fail("MPI_Init failed");
    MPI_Comm_rank(MPI_COMM_WORLD, &g_comm.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_comm.size);
    g_comm.mpi = true;
    if (g_comm.rank != 0) {  // quiet: only rank 0 prints; errors still reach the original stderr
        g_err_fd = dup(2);
        const int null = open("/dev/null", O_WRONLY);
        if (null >= 0) {
            std::fflush(stdout);
            std::fflush(stderr);
            dup2(null, 1);
            dup2(null, 2);
            close(null);
        }
    }
#else
    (void)argc;
    (void)argv;
    if (n > 1)
        fail_usage(strfmt("started as one of %d processes (%s=%d) but this binary was built without MPI: rebuild with `make mpi` (needs mpicxx: "
                          "apt-get install libopenmpi-dev openmpi-bin)", n, var.c_str(), n));
#endif
}

void comm_finalize() {
#ifdef ICL_CUDA
    cuda::nccl_finalize();
#endif
#ifdef ICL_MPI
    if (g_comm.mpi) {
        MPI_Finalize();
        g_comm.mpi = false;
    }
#endif
}

#ifdef ICL_MPI
// MPI counts are int: large buffers go in chunks of 2^30 elements.
template <typename real>
static void sum_chunks(real* buf, size_t n, MPI_Datatype type) {
    const size_t chunk = (size_t)1 << 30;
    for (size_t at = 0; at < n; at += chunk) {
        const int c = (int)std::min(chunk, n - at);
        // reduce to rank 0 (one fixed order for this world size), then broadcast: every rank holds the same bits
        if (g_comm.rank == 0) MPI_Reduce(MPI_IN_PLACE, buf + at, c, type, MPI_SUM, 0, MPI_COMM_WORLD);
        else MPI_Reduce(buf + at, nullptr, c, type, MPI_SUM, 0, MPI_COMM_WORLD);
        MPI_Bcast(buf + at, c, type, 0, MPI_COMM_WORLD);
    }
}
#endif

void comm_sum(float* buf, size_t n) {
#ifdef ICL_MPI
    if (g_comm.size > 1) sum_chunks(buf, n, MPI_FLOAT);
#else
    (void)buf;
    (void)n;
#endif
}

void comm_sum(double* buf, size_t n) {
#ifdef ICL_MPI
    if (g_comm.size > 1) sum_chunks(buf, n, MPI_DOUBLE);
#else
    (void)buf;
    (void)n;
#endif
}

void comm_broadcast(void* buf, size_t bytes, int root) {
#ifdef ICL_MPI
    if (g_comm.size <= 1) return;
    const size_t chunk = (size_t)1 << 30;
    for (size_t at = 0; at < bytes; at += chunk)
        MPI_Bcast((char*)buf + at, (int)std::min(chunk, bytes - at), MPI_BYTE, root, MPI_COMM_WORLD);
#else
    (void)buf;
    (void)bytes;
    (void)root;
#endif
}

void comm_barrier() {
#ifdef ICL_MPI
    if (g_comm.size > 1) MPI_Barrier(MPI_COMM_WORLD);
#endif
}

static bool nccl_always() {
    const char* e = std::getenv("ICL_NCCL_ALWAYS");
    return e && std::string(e) == "1";
}

void comm_require_device(Device dev) {
#ifdef ICL_CUDA
    if (dev == Device::cuda && (g_comm.size > 1 || nccl_always()) && !cuda::nccl_built())
        fail(std::string(g_comm.size > 1 ? strfmt("%d processes on GPUs need NCCL between them", g_comm.size) : "ICL_NCCL_ALWAYS=1 asks for NCCL") +
                 ", and this binary was built without it (make cuda looks for nccl.h and libnccl: NCCL_HOME, the CUDA toolkit, /usr); train on the "
                 "CPU (--device cpu) or in one process", 2);
#else
    (void)dev;
#endif
}

void comm_sum_on(Device dev, float* buf, size_t n) {
    if (dev == Device::cpu) return comm_sum(buf, n);
    if (g_comm.size <= 1 && !nccl_always()) return;
#ifdef ICL_CUDA
    cuda::nccl_sum(buf, n);
#else
    (void)buf;
    (void)n;
    fail("--device cuda: this binary was built without CUDA");
#endif
}

void comm_sum_on(Device dev, double* buf, size_t n) {
    ICL_ASSERT_MSG(dev == Device::cpu, "fp64 buffers live on the host");
    comm_sum(buf, n);
}

void comm_broadcast_on(Device dev, void* buf, size_t bytes, int root) {
    if (dev == Device::cpu) return comm_broadcast(buf, bytes, root);
    if (g_comm.size <= 1 && !nccl_always()) return;
#ifdef ICL_CUDA
    cuda::nccl_broadcast(buf, bytes, root);
#else
    (void)buf;
    (void)bytes;
    (void)root;
    fail("--device cuda: this binary was built without CUDA");
#endif
}

void comm_abort(int code) {
#ifdef ICL_MPI
    if (g_comm.mpi && g_comm.size > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
    std::_Exit(code);
}

}  // namespace icl
