#include "runtime/cli/command.h"

#include <cmath>
#include <cstdlib>

#include "runtime/cli/command_util.h"

namespace rill::cli {

std::vector<std::unique_ptr<Command>> all_commands() {
  std::vector<std::unique_ptr<Command>> commands;
  for (auto make : {run_command, agent_command, submit_command, status_command, stop_command, shutdown_command,
                    plan_command, plot_command, generate_command, check_command, launch_command, token_command,
                    keygen_command, tokenize_command, convert_command})
    commands.push_back(make());
  return commands;
}

const CLI::Validator& positive() {
  static const CLI::Validator validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        return end != text.c_str() && *end == '\0' && value > 0 && std::isfinite(value)
                   ? ""
                   : "must be a finite number > 0, got " + text;
      },
      "> 0", "positive");
  return validator;
}

const char* const kMinNodesHelp =
    "Data parallelism: when a node is lost, the job goes on from the other nodes' memory at the step every one "
    "holds, on the nodes that remain, while at least this many do (default: every node; a lost node ends the "
    "attempt)";

int check_outputs(const std::vector<std::pair<std::string, std::string>>& outputs) {
  for (const auto& [path, what] : outputs)
    if (!path.empty())
      if (Status writable = check_can_write(path, what); !writable.ok()) return fail_command(writable);
  return 0;
}

}  // namespace rill::cli
