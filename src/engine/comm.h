// comm.h — the communicator seam for data-parallel training across processes (issue 20): rank, world size, a sum
// across processes in place, broadcast, barrier, abort. One process (rank 0 of 1) unless the binary was started by
// an MPI launcher (mpirun -np N): then MPI (OpenMPI) carries host buffers between the N processes.
//
//   comm_init(argc, argv) in cli_main, before the binary runs;  comm_finalize() after it returns
//   comm().rank, comm().size
//   comm_sum(buf, n)          in place on every rank: Σ over ranks, the SAME bits on every rank (reduced to rank 0
//                             in MPI's fixed order for this world size, then broadcast), so replicated parameters
//                             stay identical and two runs with the same N are bit-identical
//   comm_broadcast(buf, bytes, root)
//   comm_abort(code)          stops every rank (an error on one rank must not leave the others waiting)
//
// GPU buffers (comm_sum_on, comm_broadcast_on) go through NCCL instead, when the CUDA build found it (make cuda).
//
// Built without MPI (the default unless `mpicxx` exists at build time, see the Makefile; `make mpi` asks for it),
// a binary started by a launcher as one of N > 1 processes says so in one line and exits 2. Only rank 0 writes files
// (write_file_atomic is a no-op on the others) and prints; the other ranks' stdout and stderr go to /dev/null, except
// an error message, which any rank prints before stopping them all.
#pragma once
#include <cstddef>

#include "engine/device.h"

namespace icl {

struct Comm {
    int rank = 0, size = 1;
    bool mpi = false;  // MPI_Init was called (started by a launcher, built with MPI)
};
const Comm& comm();
inline bool comm_root() { return comm().rank == 0; }

void comm_init(int* argc, char*** argv);
void comm_finalize();
void comm_sum(float* buf, size_t n);
void comm_sum(double* buf, size_t n);
void comm_broadcast(void* buf, size_t bytes, int root = 0);
void comm_barrier();
// The same on a model's buffers wherever they live (every rank's on the same kind of device): host buffers through MPI
// (above), GPU buffers through NCCL (cuda/nccl_comm.cu), one process per GPU (the launcher's local rank picks it).
// ICL_NCCL_ALWAYS=1 sends a GPU buffer through NCCL even in one process (the acceptance check on one GPU).
void comm_sum_on(Device dev, float* buf, size_t n);
void comm_sum_on(Device dev, double* buf, size_t n);  // host buffers only (the CUDA backend is fp32)
void comm_broadcast_on(Device dev, void* buf, size_t bytes, int root = 0);
// Before training on `dev` with several processes: fails in one line (exit 2) when they cannot sum there (a GPU
// build without NCCL).
void comm_require_device(Device dev);
[[noreturn]] void comm_abort(int code);
// The stderr of this process as it started (rank > 0 redirects fd 2 to /dev/null; errors go here).
int comm_error_fd();
// True when built with MPI support (ICL_MPI).
bool comm_built_with_mpi();

}  // namespace icl
