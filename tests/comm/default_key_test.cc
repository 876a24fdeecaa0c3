// The default key (comm/default_key.h): made on first use by a loopback
// agent in the user's config folder, private, found by that user's clients;
// --insecure and --key win over it; agents starting at once make one between
// them; a folder others may write, or a planted link, is refused.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "comm/client_key.h"
#include "comm/cluster_key.h"
#include "comm/default_key.h"

using namespace rill;
using namespace rill::comm;

namespace {

// A config folder of the test's own, and no key or --insecure in the
// environment, for the test's length.
struct FreshConfig {
  std::filesystem::path home;
  explicit FreshConfig(const std::string& name)
      : home(std::filesystem::temp_directory_path() / fmt::format("rill-default-key-{}-{}", name, ::getpid())) {
    std::filesystem::remove_all(home);
    std::filesystem::create_directories(home);
    ::setenv("XDG_CONFIG_HOME", home.c_str(), 1);
    ::unsetenv(kKeyFileEnv);
    ::unsetenv(kInsecureEnv);
  }
  ~FreshConfig() {
    ::unsetenv("XDG_CONFIG_HOME");
    ::unsetenv(kKeyFileEnv);
    ::unsetenv(kInsecureEnv);
    std::filesystem::remove_all(home);
  }
  std::string key_path() const { return (home / "rill" / "cluster.key").string(); }
};

mode_t mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

}  // namespace

TEST_CASE("a loopback agent makes the default key on first use; the user's clients and agents then hold it") {
  FreshConfig config("first-use");
  REQUIRE(default_key_path().ok());
  CHECK(*default_key_path() == config.key_path());
  // Nothing yet: a client connects without a key, an agent beyond loopback
  // makes none (every machine needs the same key).
  auto none = key_from_environment();
  REQUIRE(none.ok());
  CHECK(*none == nullptr);
  auto beyond = agent_key(false);
  REQUIRE(beyond.ok());
  CHECK(*beyond == nullptr);
  CHECK_FALSE(std::filesystem::exists(config.key_path()));

  auto made = agent_key(true);
  REQUIRE_MESSAGE(made.ok(), made.status().message());
  REQUIRE(*made != nullptr);
  CHECK(mode_of(config.key_path()) == 0600);
  CHECK(mode_of((config.home / "rill").string()) == 0700);
  // The next agent, a client, and the agent beyond loopback now read it.
  for (auto key : {agent_key(true), key_from_environment(), agent_key(false)}) {
    REQUIRE(key.ok());
    REQUIRE(*key != nullptr);
    CHECK(**key == **made);
  }
  auto client = client_key_from_environment();
  REQUIRE(client.ok());
  REQUIRE(*client != nullptr);
  CHECK(**client == client_key_of(**made));

  // --insecure (RILL_INSECURE): no key, for agents and clients alike.
  ::setenv(kInsecureEnv, "1", 1);
  for (auto key : {agent_key(true), key_from_environment()}) {
    REQUIRE(key.ok());
    CHECK(*key == nullptr);
  }
  auto no_client = client_key_from_environment();
  REQUIRE(no_client.ok());
  CHECK(*no_client == nullptr);
  ::unsetenv(kInsecureEnv);

  // --key (RILL_KEY_FILE) wins over the default.
  const std::string other_path = (config.home / "other.key").string();
  auto other = generate_cluster_key();
  REQUIRE(other.ok());
  REQUIRE(write_key_file(other_path, *other).ok());
  ::setenv(kKeyFileEnv, other_path.c_str(), 1);
  auto named = agent_key(true);
  REQUIRE(named.ok());
  CHECK(**named == *other);
}

TEST_CASE("agents that start at once make one default key between them") {
  FreshConfig config("race");
  constexpr int kAgents = 8;
  std::vector<std::shared_ptr<const ClusterKey>> keys(kAgents);
  std::vector<int> made(kAgents, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < kAgents; ++i)
    threads.emplace_back([&, i] {
      bool m = false;
      auto key = default_key_made_on_first_use(&m);
      if (key.ok()) keys[i] = *key;
      made[i] = m ? 1 : 0;
    });
  for (auto& t : threads) t.join();
  int makers = 0;
  for (int i = 0; i < kAgents; ++i) {
    REQUIRE(keys[i] != nullptr);
    CHECK(*keys[i] == *keys[0]);
    makers += made[i];
  }
  CHECK(makers == 1);
  // No temporary file is left beside it.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(config.home / "rill")) {
    CAPTURE(entry.path().string());
    ++files;
  }
  CHECK(files == 1);
}

TEST_CASE("the default key is not kept in a folder others may write, nor read through a planted link") {
  FreshConfig config("folder");
  const auto folder = config.home / "rill";
  std::filesystem::create_directories(folder);
  ::chmod(folder.c_str(), 0777);
  bool made = false;
  auto open_folder = default_key_made_on_first_use(&made);
  REQUIRE_FALSE(open_folder.ok());
  CHECK(open_folder.status().message().find("may be written by other users (mode 0777)") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(config.key_path()));

  // A link in the folder's place (to a folder someone else prepared) is
  // not followed.
  std::filesystem::remove_all(folder);
  const auto elsewhere = config.home / "elsewhere";
  std::filesystem::create_directories(elsewhere);
  ::chmod(elsewhere.c_str(), 0700);
  auto key = generate_cluster_key();
  REQUIRE(key.ok());
  REQUIRE(write_key_file((elsewhere / "cluster.key").string(), *key).ok());
  std::filesystem::create_directory_symlink(elsewhere, folder);
  auto linked = key_from_environment();
  REQUIRE_FALSE(linked.ok());
  CHECK(linked.status().message().find("is not a folder (a link is not followed)") != std::string::npos);
}
