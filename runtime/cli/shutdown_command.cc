// `rill shutdown`: every agent of a cluster exits (a running job ends at
// once); returns once no node's control port takes connections.
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/cli/command.h"
#include "runtime/cli/command_util.h"
#include "runtime/cli/key_flags.h"
#include "runtime/cluster/client.h"
#include "runtime/cluster/cluster_config.h"

namespace rill::cli {
namespace {

// Whether something listens on address:port (a TCP connection is accepted).
bool accepts_connections(const std::string& address, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return false;
  bool accepted = false;
  for (addrinfo* a = found; a && !accepted; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    accepted = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    ::close(fd);
  }
  freeaddrinfo(found);
  return accepted;
}


int shut_down(const std::string& master) {
  auto client = Client::connect(master, 5.0, /*running=*/true, /*refused_grace_s=*/0);
  if (!client.ok()) return fail_command(client.status());
  // Every node's control address, to see each go.
  auto status = (*client)->status();
  if (!status.ok()) return fail_command(status.status());
  std::vector<Machine> nodes;
  auto j = nlohmann::json::parse(*status, nullptr, false);
  if (!j.is_discarded() && j.contains("nodes"))
    for (const auto& n : j["nodes"])
      if (auto m = parse_machine_list(n.value("address", "")); m.ok() && m->size() == 1) nodes.push_back((*m)[0]);
  if (Status down = (*client)->shutdown(); !down.ok()) return fail_command(down);
  // Returns once no node's control port takes connections any more, so that
  // a cluster started next on the same ports finds them free.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  for (const Machine& node : nodes)
    while (accepts_connections(node.address, node.ctrl_port)) {
      if (std::chrono::steady_clock::now() > give_up)
        return fail_command(Status(Code::kDeadlineExceeded,
                                   fmt::format("{} took the shutdown but its agent still listens after 15 s",
                                               format_machine(node))));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  fmt::print("the cluster of {} is shut down: its {} agent(s) exited\n", master, nodes.size());
  return 0;
}

class ShutdownCommand : public Command {
 public:
  void add(CLI::App& rill) override {
    app_ = rill.add_subcommand("shutdown", "Stop every agent of a cluster (a running job ends at once)");
    app_->add_option("--master", master_, "The master's address[:port]")->required();
    key_.add_key(app_);
    key_.add_insecure(app_, "Connect without a key (to agents started with --insecure)");
  }
  int act() override {
    if (int code = key_.apply(/*client_key_does=*/true); code != 0) return code;
    return shut_down(master_);
  }

 private:
  std::string master_;
  KeyFlags key_;
};

}  // namespace

std::unique_ptr<Command> shutdown_command() { return std::make_unique<ShutdownCommand>(); }

}  // namespace rill::cli
