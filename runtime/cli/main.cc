// The `rill` command: a table of subcommands (runtime/cli/command.h), each
// in a file of its own, parsed once; the one given runs.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "graph/check_util.h"
#include "kernels/ops/cpu_kernels_info.h"
#include "runtime/cli/command.h"
#include "runtime/cli/command_util.h"

int main(int argc, char** argv) {
  // OpenBLAS chose its kernels as it loaded; where it fell back to generic
  // ones on a CPU it does not know, the command runs itself again with the
  // CPU's own named (kernels/ops/cpu_kernels_info.h). If that exec fails,
  // it goes on with OpenBLAS's choice.
  if (const std::string core = rill::better_blas_core(); !core.empty()) {
    ::setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
    // By its own path, so the process keeps its name ("rill", not "exe").
    char self[4096];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
      self[n] = '\0';
      ::execv(self, argv);
    }
    ::execv("/proc/self/exe", argv);
    ::unsetenv("OPENBLAS_CORETYPE");  // not run again: what it starts runs OpenBLAS's choice too
  }
  CLI::App app{"Rill: a decentralized, actor-based training engine"};
  app.require_subcommand(1);
  std::vector<std::unique_ptr<rill::cli::Command>> commands = rill::cli::all_commands();
  std::vector<std::string> names;
  for (const auto& command : commands) {
    command->add(app);
    names.push_back(command->app()->get_name());
  }
  // An unknown command is named as one (CLI11 would say a command is required).
  if (argc > 1 && argv[1][0] != '-' && std::find(names.begin(), names.end(), argv[1]) == names.end())
    return rill::fail_command(rill::invalid_argument("unknown command '{}'{}; the commands: {}", argv[1],
                                                     rill::graph::check::did_you_mean(argv[1], names),
                                                     fmt::join(names, ", ")));
  std::vector<char*> words(argv, argv + argc);
  for (const auto& command : commands) command->before_parse(words);
  argc = static_cast<int>(words.size());
  argv = words.data();
  CLI11_PARSE(app, argc, argv);
  for (const auto& command : commands)
    if (command->app()->parsed()) return command->act();
  return 1;  // require_subcommand(1): not reached
}
