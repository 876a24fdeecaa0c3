// No job reads a key file: a client holding only the client key submits
// jobs whose datasets are the agent's cluster key (by a hard link inside the
// data root, or by a link out of it); both are refused, and the secret
// appears nowhere (the submitter's output, the agent's log). A data root
// that holds the key is refused when given, and left out when it is a
// default (the agent started in the key's folder).
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/common/csv_job.h"
#include "tests/e2e/key_util.h"
#include "tests/e2e/process_util.h"

using namespace rill::testing;

namespace {

// The secret's line of a key file: its first line that is not a comment.
std::string secret_of(const std::filesystem::path& key_file) {
  std::ifstream in(key_file);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line[0] != '#') return line;
  return {};
}

}  // namespace

TEST_CASE("a client cannot make a job read the cluster key, by a hard link or a link, and the secret is quoted nowhere") {
  auto dir = temp_dir("rill-key-access-");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "data");
  Ran made = run_rill("keygen " + (dir / "cluster.key").string() + " --client " + (dir / "client.key").string());
  REQUIRE_MESSAGE(made.code == 0, made.output);
  const std::string key = (dir / "cluster.key").string(), client = (dir / "client.key").string();
  const std::string secret = secret_of(key);
  REQUIRE(secret.size() == 40);
  std::filesystem::create_hard_link(key, dir / "data" / "hard.csv");  // inside the root, by path
  std::filesystem::create_symlink(key, dir / "data" / "link.csv");    // resolves out of it
  // A data root that holds the key file is refused before the agent listens.
  Ran refused = run_rill("agent --machines 127.0.0.1:19440 --rank 0 --http off --key " + key + " --data-root " +
                         dir.string(), 30);
  CHECK(refused.code == 1);
  CHECK_MESSAGE(refused.output.find("holds the key file " + key) != std::string::npos, refused.output);

  const std::string master = "127.0.0.1:19440";
  Agent agent("--machines " + master + " --rank 0 --http off --key " + key + " --data-root " +
                  (dir / "data").string(),
              (dir / "agent.log").string());
  wait_formed(master, client);
  for (const char* name : {"hard.csv", "link.csv"}) {
    CAPTURE(name);
    const std::string job_file = (dir / (std::string(name) + ".json")).string();
    std::ofstream(job_file) << csv_classifier_job((dir / "data" / name).string(), 1, 1);
    Ran submitted = run_rill("submit " + job_file + " --master " + master + " --key " + client, 60);
    CHECK(submitted.code != 0);
    CAPTURE(submitted.output);
    CHECK((submitted.output.find("is a key file this process holds") != std::string::npos ||
           submitted.output.find("is outside the folders this agent lets jobs use") != std::string::npos));
    CHECK(submitted.output.find(secret.substr(0, 7)) == std::string::npos);
  }
  // The agent's status (what a dashboard shows) and its log hold no part of it either.
  Ran status = run_rill("status --master " + master + " --key " + client);
  CHECK(status.output.find(secret.substr(0, 7)) == std::string::npos);
  Ran down = run_rill("shutdown --master " + master + " --key " + client);
  CHECK_MESSAGE(down.code == 0, down.output);
  CHECK(agent.wait(15) == 0);
  CHECK(agent.output().find(secret.substr(0, 7)) == std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("an agent started in its key's folder leaves that folder out of its default data roots") {
  auto dir = temp_dir("rill-key-default-root-");
  std::filesystem::remove(dir / "cluster.key");
  Ran made = run_rill("keygen " + (dir / "cluster.key").string());
  REQUIRE_MESSAGE(made.code == 0, made.output);
  const std::string key = (dir / "cluster.key").string();
  Agent agent("--machines 127.0.0.1:19445 --rank 0 --http off --key " + key, (dir / "agent.log").string(),
              "env -C " + dir.string());
  wait_formed("127.0.0.1:19445", key);
  CAPTURE(agent.output());
  CHECK(agent.output().find("the default folder " + dir.string() + " (the working folder) is left out of the data "
                            "and checkpoint roots: it holds the key file " + key) != std::string::npos);
  Ran down = run_rill("shutdown --master 127.0.0.1:19445 --key " + key);
  CHECK_MESSAGE(down.code == 0, down.output);
  CHECK(agent.wait(15) == 0);
  std::filesystem::remove_all(dir);
}
