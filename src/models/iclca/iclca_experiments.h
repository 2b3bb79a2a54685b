// iclca_experiments.h — the subcommands of the `iclca` binary (src/iclca.cpp holds only its flags and this
// table's dispatch). Each reads its flags from the Cli and returns the process exit code.
#pragma once
#include "engine/cli.h"

namespace icl::iclca_cmd {

int cmd_train(const Cli& cli);
int cmd_convert(const Cli& cli);
int cmd_eval(const Cli& cli);
int cmd_generate(const Cli& cli);
int cmd_e1(const Cli& cli);
int cmd_e2(const Cli& cli);
int cmd_e3(const Cli& cli);
int cmd_e4(const Cli& cli);
int cmd_bench(const Cli& cli);

}  // namespace icl::iclca_cmd
