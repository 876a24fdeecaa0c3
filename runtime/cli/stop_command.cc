// `rill stop`: a cluster's job (the running one by default) stops at the
// next step boundary, with its last checkpoint there, or at once (--now).
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "runtime/cli/command.h"
#include "runtime/cli/command_util.h"
#include "runtime/cli/key_flags.h"
#include "runtime/cluster/client.h"

namespace rill::cli {
namespace {

class StopCommand : public Command {
 public:
  void add(CLI::App& rill) override {
    app_ = rill.add_subcommand(
        "stop", "Stop a cluster's running job at the next step boundary, with its last checkpoint there");
    app_->add_option("--master", master_, "The master's address[:port]")->required();
    app_->add_option("--job", job_, "The job's id (default: the running one)");
    app_->add_flag("--now", now_, "Stop it at once, not at a step boundary");
    key_.add_key(app_);
    key_.add_insecure(app_, "Connect without a key (to agents started with --insecure)");
  }
  int act() override {
    if (int code = key_.apply(/*client_key_does=*/true); code != 0) return code;
    auto client = Client::connect(master_, 5.0, /*running=*/true, /*refused_grace_s=*/0);
    if (!client.ok()) return fail_command(client.status());
    auto stopping = (*client)->stop(job_, now_);
    if (!stopping.ok()) return fail_command(stopping.status());
    fmt::print("{}\n", *stopping);
    return 0;
  }

 private:
  std::string master_;
  int64_t job_ = 0;
  bool now_ = false;
  KeyFlags key_;
};

}  // namespace

std::unique_ptr<Command> stop_command() { return std::make_unique<StopCommand>(); }

}  // namespace rill::cli
