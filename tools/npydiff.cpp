// npydiff — compare two --dump-npy directories tensor by tensor (src/engine/npy_compare.h), e.g. one step of a CPU
// run against the same step on the GPU:
//
//   train_gpt --preset tiny --steps 1 --dump-npy out/cpu
//   train_gpt --preset tiny --steps 1 --dump-npy out/gpu --device cuda
//   npydiff out/cpu out/gpu
//
// Exit status: 0 if every tensor is within tolerance and both directories hold the same tensors with the same
// shapes; 1 otherwise; 2 for bad flags.
#include <cstdio>

#include "engine/cli.h"
#include "engine/npy_compare.h"

using namespace icl;

namespace {

int run(int argc, char** argv) {
    Cli cli("npydiff", "Compare two --dump-npy directories tensor by tensor: max |d|, max |d|/(atol + rtol*|ref|), RMS relative "
                       "error; lists tensors missing from either side or with different shapes. DIR_A is the reference.");
    cli.positionals("DIR_A DIR_B", 2, 2);
    cli.flag("--atol", "1e-5", "absolute tolerance");
    cli.flag("--rtol", "1e-3", "relative tolerance");
    cli.epilog("examples:\n"
               "  npydiff out/cpu out/gpu                     # a CPU and a GPU dump of the same step\n"
               "  npydiff out/a out/b --atol 0 --rtol 0       # any difference at all fails");
    if (!cli.parse(argc, argv)) return 0;
    const double atol = cli.get_double("--atol", 0), rtol = cli.get_double("--rtol", 0);
    NpyDiffResult r = npydiff_dirs(cli.args()[0], cli.args()[1], atol, rtol, stdout);
    return r.ok() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return cli_main(argc, argv, run); }
