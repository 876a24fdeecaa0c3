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
    "When a node is lost, the job goes on from the other nodes' memory, on the nodes that remain, while at least "
    "this many do: data parallelism at the step every node holds, a layout that splits variables across nodes from "
    "the replicas (--replica-every) (default: every node; a lost node ends the attempt)";
const char* const kReplicaEveryHelp =
    "With --min-nodes: every node's pieces are copied to the next node's memory every this many steps, so that a "
    "layout that splits variables across nodes goes on without a lost node (default: 10 for pipelines, parameter "
    "servers, ZeRO and placed variables, none for data parallelism; 0: never)";
const char* const kReplicaCopiesHelp =
    "With replicas: each node's pieces go to this many next nodes' memory, so that a job goes on from memory after "
    "losing up to this many nodes at once, at this many times the copies' traffic and memory (default 1; at most "
    "the nodes less one)";

int check_outputs(const std::vector<std::pair<std::string, std::string>>& outputs) {
  for (const auto& [path, what] : outputs)
    if (!path.empty())
      if (Status writable = check_can_write(path, what); !writable.ok()) return fail_command(writable);
  return 0;
}

}  // namespace rill::cli
