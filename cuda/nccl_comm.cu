// nccl_comm.cu — the communicator seam's device half (engine/comm.h: comm_sum_on / comm_broadcast_on for
// Device::cuda): NCCL between the GPUs of data-parallel processes, one process per GPU. Compiled with NCCL only
// when the Makefile found nccl.h in the CUDA toolkit (ICL_NCCL); otherwise every entry point says so in one line.
//
//   the communicator   made on first use: rank 0 draws an ncclUniqueId, MPI broadcasts it (comm_broadcast: host
//                      bytes), every rank joins with ncclCommInitRank(world size, id, rank). One process alone
//                      (ICL_NCCL_ALWAYS=1, the acceptance check on one GPU) draws its own id: no MPI needed.
//   nccl_sum           in place, ncclAllReduce(sum) on the default stream, then a stream sync (the caller reads
//                      the result next). NCCL's ring and tree all-reduces end with every rank holding the same
//                      bits, so replicated parameters stay identical across ranks.
//   nccl_broadcast     ncclBroadcast of raw bytes from `root`.
// Which GPU each process uses is chosen earlier, before anything is allocated (cuda_device.cu: the launcher's
// local rank modulo the visible GPUs).
#include "cuda/common.cuh"
#include "cuda/layers.h"
#include "engine/comm.h"

#ifdef ICL_NCCL
#include <nccl.h>
#endif

namespace icl::cuda {

#ifdef ICL_NCCL

#define ncclCheck(call) check_nccl((call), #call, __FILE__, __LINE__)
static void check_nccl(ncclResult_t r, const char* what, const char* file, int line) {
    if (r != ncclSuccess) fail(strfmt("NCCL error at %s:%d: %s: %s (%s)", file, line, what, ncclGetErrorString(r), ncclGetLastError(nullptr)));
}

static ncclComm_t g_nccl = nullptr;

static ncclComm_t nccl_comm() {
    if (g_nccl) return g_nccl;
    const Comm& c = comm();
    ncclUniqueId id;
    if (c.rank == 0) ncclCheck(ncclGetUniqueId(&id));
    comm_broadcast(&id, sizeof(id), 0);  // host bytes over MPI (a no-op for one process)
    ncclCheck(ncclCommInitRank(&g_nccl, c.size, id, c.rank));
    return g_nccl;
}

bool nccl_built() { return true; }

void nccl_sum(float* buf, size_t n) {
    if (n == 0) return;
    ncclCheck(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, nccl_comm(), 0));
    cudaCheck(cudaStreamSynchronize(0));
}

void nccl_broadcast(void* buf, size_t bytes, int root) {
    if (bytes == 0) return;
    ncclCheck(ncclBroadcast(buf, buf, bytes, ncclUint8, root, nccl_comm(), 0));
    cudaCheck(cudaStreamSynchronize(0));
}

void nccl_finalize() {
    if (g_nccl) ncclCommDestroy(g_nccl);  // at exit: an error here has nothing left to stop
    g_nccl = nullptr;
}

#else

static void no_nccl() {
    fail("several processes on GPUs need NCCL, and this binary was built without it (the Makefile looks for nccl.h in the CUDA "
         "toolkit, $(CUDA_HOME)/include); train on the CPU (--device cpu) or in one process", 2);
}
bool nccl_built() { return false; }
void nccl_sum(float*, size_t) { no_nccl(); }
void nccl_broadcast(void*, size_t, int) { no_nccl(); }
void nccl_finalize() {}

#endif

}  // namespace icl::cuda
