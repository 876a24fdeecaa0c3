// `rill check JOB`: the job as `rill run` would take it (--set applied, then
// checked), then what this machine can check of its data: every input's
// shape against its files' heads, each dataset it can read here read whole
// as the run reads it (a file missing here, or a pipe, is a note), and the
// index fields (token ids, labels) against the ops reading them, over the
// job's plan for --nodes x --devices (given --nodes, a plan those nodes
// cannot hold is an error; else a note).
#pragma once

#include <string>
#include <vector>

namespace rill {

struct CheckArgs {
  std::string job_path;
  std::vector<std::string> overrides;
  std::string devices;  // "" : the job's train.devices
  int nodes = 1;
  bool nodes_given = false;
};

// Prints notes and "JOB: ok"; the exit code (an error printed as rill's).
int check_command(const CheckArgs& args);

}  // namespace rill
