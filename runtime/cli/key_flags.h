// --key and --insecure, on every command that talks to agents: read and
// checked once the command line is parsed, so that a bad file is named as
// the flag's, then put in the environment, where everything the command
// starts (agents, launched processes) and its own connections find them
// (comm/default_key.h).
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace rill::cli {

class KeyFlags {
 public:
  // --key FILE (`help`: its text; empty: the cluster's key file).
  void add_key(CLI::App* command, const std::string& help = "");
  void add_insecure(CLI::App* command, const std::string& help);
  // The flags into the environment; 0, or the exit code of a key file that
  // cannot be read (`client_key_does`: the command only talks to a master,
  // so a client key does as well as the cluster key).
  int apply(bool client_key_does);
  const std::string& file() const { return file_; }
  bool insecure() const { return insecure_; }

 private:
  std::string file_;
  bool insecure_ = false;
};

}  // namespace rill::cli
