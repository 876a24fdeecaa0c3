#include "runtime/cli/key_flags.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "comm/client_key.h"
#include "comm/cluster_key.h"
#include "comm/default_key.h"
#include "runtime/cli/command_util.h"

namespace rill::cli {

void KeyFlags::add_key(CLI::App* command, const std::string& help) {
  command->add_option("--key", file_,
                      help.empty() ? fmt::format("The cluster's key file (`rill keygen` writes one; default: ${})",
                                                 comm::kKeyFileEnv)
                                   : help);
}

void KeyFlags::add_insecure(CLI::App* command, const std::string& help) {
  command->add_flag("--insecure", insecure_, help);
}

int KeyFlags::apply(bool client_key_does) {
  // No key, said once for everything this command starts.
  if (insecure_) ::setenv(comm::kInsecureEnv, "1", 1);
  if (file_.empty()) return 0;
  std::error_code ec;
  const std::string absolute = std::filesystem::absolute(file_, ec).string();
  ::setenv(comm::kKeyFileEnv, absolute.c_str(), 1);
  const bool client_key = client_key_does && comm::is_client_key_file(file_);
  if (auto key = client_key ? comm::client_key_from_environment().status() : comm::read_key_file(file_).status();
      !key.ok())
    return fail_command(key.with_context("--key"));
  return 0;
}

}  // namespace rill::cli
