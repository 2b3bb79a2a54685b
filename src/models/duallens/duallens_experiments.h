// duallens_experiments.h — the subcommands of the `duallens` binary (src/duallens.cpp holds only its flags and this
// table's dispatch). Each reads its flags from the Cli and returns the process exit code.
#pragma once
#include "engine/cli.h"

namespace icl::duallens_cmd {

int cmd_check(const Cli& cli);
int cmd_features(const Cli& cli);
int cmd_experiment(const Cli& cli);

}  // namespace icl::duallens_cmd
