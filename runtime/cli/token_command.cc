// `rill token`: the bearer token of a keyed cluster's HTTP endpoint
// (dashboard, /metrics, /api), derived from the key, and the dashboard's
// address with it.
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "comm/client_key.h"
#include "runtime/cli/command.h"
#include "runtime/cli/command_util.h"
#include "runtime/cli/key_flags.h"
#include "runtime/cluster/agent.h"
#include "runtime/cluster/client.h"

namespace rill::cli {
namespace {

class TokenCommand : public Command {
 public:
  void add(CLI::App& rill) override {
    app_ = rill.add_subcommand(
        "token", "Print the bearer token of a keyed cluster's HTTP endpoint (dashboard, /metrics, /api)");
    app_->add_option("--http", http_, "Also print the dashboard's address with it: the master's ADDRESS:PORT")
        ->capture_default_str();
    app_->add_option("--master", master_, "Ask this master (address[:port]) where it serves, instead of assuming --http");
    key_.add_key(app_);
  }

  int act() override {
    if (int code = key_.apply(/*client_key_does=*/true); code != 0) return code;
    auto key = comm::client_key_from_environment();
    if (!key.ok()) return fail_command(key.status());
    if (!*key) return fail_command(invalid_argument("no cluster key: give --key FILE or {}", comm::kKeyFileEnv));
    const std::string value = (*key)->http_token;
    if (!master_.empty()) {  // where it really serves, if it does
      auto client = Client::connect(master_, 5.0, /*running=*/true, /*refused_grace_s=*/0);
      auto status = client.ok() ? (*client)->status() : StatusOr<std::string>(client.status());
      if (!status.ok()) return fail_command(status.status());
      auto j = nlohmann::json::parse(*status, nullptr, false);
      if (j.is_discarded() || !j.contains("http") || !j["http"].is_string())
        return fail_command(Status(Code::kUnavailable,
                                   fmt::format("the master {} serves no HTTP endpoint (--http off, or its port was "
                                               "taken)",
                                               master_)));
      http_ = j["http"].get<std::string>();
    }
    fmt::print("{}\nhttp://{}/?token={}\n", value, http_, value);
    return 0;
  }

 private:
  std::string http_ = kDefaultHttp, master_;
  KeyFlags key_;
};

}  // namespace

std::unique_ptr<Command> token_command() { return std::make_unique<TokenCommand>(); }

}  // namespace rill::cli
