// Helpers for end-to-end tests of keyed clusters: a key file, waiting for a
// cluster to form, and an environment that names no key.
#pragma once

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include <doctest/doctest.h>

#include "tests/e2e/process_util.h"

namespace rill::testing {

// `rill keygen PATH`; the path.
inline std::string keygen(const std::filesystem::path& path) {
  Ran ran = run_rill("keygen " + path.string());
  REQUIRE_MESSAGE(ran.code == 0, ran.output);
  return path.string();
}

// Polls `rill status` (with `key`; "": the user's default) until every node
// is up, for at most 600 tries and 60 s (a master not listening yet is
// reported at once).
inline void wait_formed(const std::string& master, const std::string& key) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int i = 0; i < 600 && std::chrono::steady_clock::now() < deadline; ++i) {
    Ran ran = run_rill("status --master " + master + (key.empty() ? "" : " --key " + key), 15);
    if (ran.code == 0 && ran.output.find("not joined") == std::string::npos &&
        ran.output.find("joining") == std::string::npos)
      return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  FAIL("the cluster did not form");
}

// No key named, no --insecure, and a config folder of the test's own with no
// default key in it yet (comm/default_key.h), for the test's length.
struct NoKeyInEnvironment {
  std::filesystem::path config = temp_dir("rill-security-config-");
  NoKeyInEnvironment() {
    ::unsetenv("RILL_KEY_FILE");
    ::unsetenv("RILL_INSECURE");
    std::filesystem::remove_all(config / "rill");
    previous_ = std::getenv("XDG_CONFIG_HOME") ? std::getenv("XDG_CONFIG_HOME") : "";
    ::setenv("XDG_CONFIG_HOME", config.c_str(), 1);
  }
  ~NoKeyInEnvironment() {
    if (previous_.empty()) ::unsetenv("XDG_CONFIG_HOME");
    else ::setenv("XDG_CONFIG_HOME", previous_.c_str(), 1);
  }
  NoKeyInEnvironment(const NoKeyInEnvironment&) = delete;
  NoKeyInEnvironment& operator=(const NoKeyInEnvironment&) = delete;

 private:
  std::string previous_;
};

}  // namespace rill::testing
