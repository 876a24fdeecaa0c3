// `rill keygen`: a new cluster key file (for the agents), its client key
// (for those who submit, watch and stop jobs), or the user's default key.
#include <string>

#include <fmt/format.h>

#include "comm/client_key.h"
#include "comm/cluster_key.h"
#include "comm/default_key.h"
#include "runtime/cli/command.h"
#include "runtime/cli/command_util.h"
#include "runtime/cli/key_flags.h"

namespace rill::cli {
namespace {

class KeygenCommand : public Command {
 public:
  void add(CLI::App& rill) override {
    app_ = rill.add_subcommand("keygen", "Write a new cluster key file, and its client key (mode 0600)");
    app_->add_option("file", path_, "Where to write a new cluster key (for the agents)");
    app_->add_flag("--default", default_,
                   "Write it where agents and clients look when no key is named ($XDG_CONFIG_HOME/rill/cluster.key, "
                   "else ~/.config/rill/cluster.key), outside every folder jobs may read by default");
    app_->add_option("--client", client_,
                     "Also write its client key here: it submits, watches and stops jobs and cannot act as a node "
                     "(without FILE: the client key of the cluster key --key names)");
    key_.add_key(app_, "With --client alone: the existing cluster key to make the client key of");
    app_->add_flag("--force", force_, "Replace existing files");
  }

  int act() override {
    if (int code = key_.apply(/*client_key_does=*/false); code != 0) return code;
    if (path_.empty() && client_.empty() && !default_)
      return fail_command(invalid_argument(
          "rill keygen FILE writes a new cluster key; --client CLIENT_FILE also (or, with --key, only) its client key"));
    if (default_ && !path_.empty())
      return fail_command(invalid_argument("rill keygen: give a FILE or --default, not both"));
    if (default_) {
      auto path = comm::prepare_default_key_folder();
      if (!path.ok()) return fail_command(path.status());
      path_ = *path;
    }
    auto key = path_.empty() ? existing_key() : new_key();
    if (!key.ok()) return fail_command(key.status());
    if (!client_.empty()) {
      if (Status written = comm::write_client_key_file(client_, comm::client_key_of(*key), force_); !written.ok())
        return fail_command(written);
      fmt::print("wrote its client key {}: give it to those who submit, watch and stop jobs (it cannot act as a "
                 "node)\n",
                 client_);
    }
    return 0;
  }

 private:
  // A new key, written to path_.
  StatusOr<comm::ClusterKey> new_key() {
    RILL_ASSIGN_OR_RETURN(comm::ClusterKey key, comm::generate_cluster_key());
    RILL_RETURN_IF_ERROR(comm::write_key_file(path_, key, force_));
    if (default_)
      fmt::print("wrote the cluster key {}: agents and clients of this user use it when no key is named; put the "
                 "same file at the same place on every machine\n",
                 path_);
    else
      fmt::print("wrote the cluster key {}: give it to every agent (--key {} or {}={}); keep it outside the "
                 "folders jobs may read\n",
                 path_, path_, comm::kKeyFileEnv, path_);
    return key;
  }
  // The key --key names (--client alone).
  static StatusOr<comm::ClusterKey> existing_key() {
    RILL_ASSIGN_OR_RETURN(auto existing, comm::key_from_environment());
    if (!existing)
      return invalid_argument("--client alone makes the client key of an existing cluster key: name it with --key FILE");
    return *existing;
  }

  std::string path_, client_;
  bool default_ = false, force_ = false;
  KeyFlags key_;
};

}  // namespace

std::unique_ptr<Command> keygen_command() { return std::make_unique<KeygenCommand>(); }

}  // namespace rill::cli
