// The `rill` command line as a table of commands: each subcommand is a
// Command in a file of its own under runtime/cli/ (run_command.cc,
// agent_command.cc, ...), which adds its options and help to the command
// line and acts when it is the one given. main() builds the table, parses
// once, and runs the command parsed. Called from the process's main thread
// only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace rill::cli {

class Command {
 public:
  virtual ~Command() = default;
  // Adds this command, its options and their help to `rill`.
  virtual void add(CLI::App& rill) = 0;
  // The words of the command line before they are parsed: `rill launch`
  // keeps what follows its target for the program it starts.
  virtual void before_parse(std::vector<char*>& /*words*/) {}
  // Runs the command (the one parsed); the process's exit code.
  virtual int act() = 0;
  // Its subcommand, once added.
  CLI::App* app() const { return app_; }

 protected:
  CLI::App* app_ = nullptr;
};

// The table, in the order `rill --help` lists them.
std::vector<std::unique_ptr<Command>> all_commands();

std::unique_ptr<Command> run_command();
std::unique_ptr<Command> agent_command();
std::unique_ptr<Command> submit_command();
std::unique_ptr<Command> status_command();
std::unique_ptr<Command> stop_command();
std::unique_ptr<Command> shutdown_command();
std::unique_ptr<Command> plan_command();
std::unique_ptr<Command> plot_command();
std::unique_ptr<Command> generate_command();
std::unique_ptr<Command> check_command();
std::unique_ptr<Command> launch_command();
std::unique_ptr<Command> token_command();
std::unique_ptr<Command> keygen_command();
std::unique_ptr<Command> tokenize_command();
std::unique_ptr<Command> convert_command();

// What several commands' options share.
// A count or a time in seconds: a number > 0 (CLI11's own check prints its
// range's float bounds).
const CLI::Validator& positive();
// --min-nodes's help (run and submit).
extern const char* const kMinNodesHelp;
// --replica-every's help (run and submit).
extern const char* const kReplicaEveryHelp;
extern const char* const kReplicaCopiesHelp;
// Files written at a run's end (the result, the trace, the metrics), found
// unwritable before it starts: each pair is a path ("" for none) and what
// it is ("the result file"); the exit code of the first that cannot be
// written, else 0.
int check_outputs(const std::vector<std::pair<std::string, std::string>>& outputs);

}  // namespace rill::cli
