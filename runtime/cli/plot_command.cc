// `rill plot`: a run's loss curve drawn to a PNG by Python's matplotlib,
// from a result JSON or a metrics file (the script is in the binary).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "runtime/cli/command.h"
#include "runtime/cli/command_util.h"
#include "runtime/cli/plot_script.h"

namespace rill::cli {
namespace {

class PlotCommand : public Command {
 public:
  void add(CLI::App& rill) override {
    app_ = rill.add_subcommand("plot", "Draw a run's loss curve to a PNG (Python with matplotlib)");
    app_->add_option("input", input_, "A result JSON (--result) or a metrics file of JSON lines")->required();
    app_->add_option("-o,--output", output_, "The PNG to write")->capture_default_str();
  }
  int act() override {
    // Debian's python3 (where python3-matplotlib goes) before whatever is first on PATH.
    const char* python = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
    execlp(python, python, "-c", graph::kPlotScript, input_.c_str(), output_.c_str(), nullptr);
    return fail_command(invalid_argument("rill plot needs Python 3 ({}): {}", python, std::strerror(errno)));
  }

 private:
  std::string input_, output_ = "loss.png";
};

}  // namespace

std::unique_ptr<Command> plot_command() { return std::make_unique<PlotCommand>(); }

}  // namespace rill::cli
