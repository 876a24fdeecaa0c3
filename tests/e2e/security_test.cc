// A keyed cluster lets no one in without its key: real agents on loopback,
// clients and agents without the key or with another one are refused at the
// handshake with errors naming the address on both sides, a socket that
// connects to a data port is refused at its handshake (it gives no rank's
// password), and agents will not listen beyond loopback without a key. Files rill writes in folders every user may
// write are never written through a link another user planted.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "runtime/cluster/client.h"
#include "runtime/cluster/control_codec.h"
#include "comm/cluster_key.h"
#include "tests/common/csv_job.h"
#include "tests/e2e/key_util.h"
#include "tests/e2e/process_util.h"

using namespace rill::testing;


TEST_CASE("a keyed cluster: clients without its key cannot submit, stat or shut down; with it they can") {
  NoKeyInEnvironment clean;
  auto dir = temp_dir("rill-security-");
  const std::string key = keygen(dir / "cluster.key"), wrong = keygen(dir / "wrong.key");
  const std::string machines = "127.0.0.1:19250,127.0.0.2:19250", master = "127.0.0.1:19250";
  Agent node0("--machines " + machines + " --rank 0 --http off --key " + key, (dir / "a0.log").string());
  Agent node1("--machines " + machines + " --rank 1 --key " + key, (dir / "a1.log").string());
  wait_formed(master, key);
  const std::string job = root() + "/samples/linear_regression/linear_regression.json";

  // No key: refused at the handshake, at once, saying what is missing.
  for (const std::string& command : {"status --master " + master, "submit " + job + " --master " + master}) {
    CAPTURE(command);
    Ran ran = run_rill(command);
    CAPTURE(ran.output);
    CHECK(ran.code != 0);
    CHECK(ran.output.find("the master 127.0.0.1:19250 ") != std::string::npos);
    CHECK(ran.output.find("requires the cluster key") != std::string::npos);
    CHECK(ran.seconds < 5);
  }
  // Another key: refused, named as such.
  Ran other = run_rill("status --master " + master + " --key " + wrong);
  CAPTURE(other.output);
  CHECK(other.code != 0);
  CHECK(other.output.find("its cluster key is not this one") != std::string::npos);
  // A shutdown without the key reaches nobody.
  {
    auto client = rill::Client::connect(master, 5);
    REQUIRE(client.ok());
    rill::Status down = (*client)->shutdown();
    CHECK(down.code() == rill::Code::kPermissionDenied);
  }
  // The master logged the refusals (with the peer's address where it could
  // be read: a peer without a key may be gone before it is).
  CHECK(node0.output().find("control port 127.0.0.1:19250: refused a connection from ") != std::string::npos);

  // With the key, a job runs and the cluster is still whole.
  Ran ran = run_rill("submit " + job + " --master " + master + " --key " + key + " --steps 50 --result " +
                     (dir / "r.json").string());
  REQUIRE_MESSAGE(ran.code == 0, ran.output);
  auto result = nlohmann::json::parse(read_text((dir / "r.json").string()));
  CHECK(result["steps"].get<int64_t>() == 50);
  ::setenv("RILL_KEY_FILE", key.c_str(), 1);  // the C++ client reads it too
  auto client = rill::Client::connect(master, 10);
  REQUIRE(client.ok());
  CHECK((*client)->shutdown().ok());
  ::unsetenv("RILL_KEY_FILE");
  CHECK(node0.wait(15) == 0);
  CHECK(node1.wait(15) == 0);
}

// A client key (rill keygen --client) submits, watches, stops and shuts
// down, and reads the token; it holds no node's key, so an agent cannot
// start with it (tests/comm/cluster_key_test.cc checks it holds no secret).
TEST_CASE("a client key does what a client does and nothing an agent does") {
  NoKeyInEnvironment clean;
  auto dir = temp_dir("rill-client-key-");
  std::filesystem::remove(dir / "cluster.key");
  std::filesystem::remove(dir / "client.key");
  Ran made = run_rill("keygen " + (dir / "cluster.key").string() + " --client " + (dir / "client.key").string());
  REQUIRE_MESSAGE(made.code == 0, made.output);
  const std::string key = (dir / "cluster.key").string(), client = (dir / "client.key").string();
  const std::string machines = "127.0.0.1:19260,127.0.0.2:19260", master = "127.0.0.1:19260";
  Agent node0("--machines " + machines + " --rank 0 --http off --key " + key, (dir / "c0.log").string());
  Agent node1("--machines " + machines + " --rank 1 --key " + key, (dir / "c1.log").string());
  wait_formed(master, client);
  Ran submitted = run_rill("submit " + root() + "/samples/linear_regression/linear_regression.json --master " +
                           master + " --key " + client + " --steps 20");
  CHECK_MESSAGE(submitted.code == 0, submitted.output);
  Ran token = run_rill("token --key " + client), same = run_rill("token --key " + key);
  CHECK(token.code == 0);
  CHECK(token.output == same.output);
  Ran stop = run_rill("stop --master " + master + " --key " + client);
  CHECK_MESSAGE(stop.code == 0, stop.output);
  // An agent with it is refused before it starts, saying what it needs.
  Ran agent = run_rill("agent --machines 127.0.0.1:19262 --rank 0 --key " + client);
  CHECK(agent.code == 1);
  CHECK(agent.output.find("is a client key: it submits and watches jobs, and agents (rill agent, rill launch) need "
                          "the cluster key it was made from") != std::string::npos);
  // A client key made later from the cluster key is the same.
  std::filesystem::remove(dir / "again.key");
  Ran again = run_rill("keygen --client " + (dir / "again.key").string() + " --key " + key);
  REQUIRE_MESSAGE(again.code == 0, again.output);
  CHECK(read_text(client) == read_text((dir / "again.key").string()));
  Ran down = run_rill("shutdown --master " + master + " --key " + client);
  CHECK_MESSAGE(down.code == 0, down.output);
  CHECK(node0.wait(15) == 0);
  CHECK(node1.wait(15) == 0);
}

TEST_CASE("an agent without the cluster key, or with another, cannot join; a stranger on the data port is not heard") {
  NoKeyInEnvironment clean;
  auto dir = temp_dir("rill-security-join-");
  const std::string key = keygen(dir / "cluster.key"), wrong = keygen(dir / "wrong.key");
  const std::string machines = "127.0.0.1:19280,127.0.0.2:19280";
  Agent node0("--machines " + machines + " --rank 0 --http off --join-timeout 60 --key " + key,
              (dir / "b0.log").string());
  {
    Agent keyless("--machines " + machines + " --rank 1 --join-timeout 10 --insecure", (dir / "b1.log").string());
    CHECK(keyless.wait(10) == 1);
    CAPTURE(keyless.output());
    CHECK(keyless.output().find("node 1 (127.0.0.2:19280): cannot join: the master 127.0.0.1:19280 ") !=
          std::string::npos);
    CHECK(keyless.output().find("requires the cluster key") != std::string::npos);
  }
  {
    Agent other("--machines " + machines + " --rank 1 --join-timeout 10 --key " + wrong, (dir / "b2.log").string());
    CHECK(other.wait(10) == 1);
    CAPTURE(other.output());
    CHECK(other.output().find("its cluster key is not this one") != std::string::npos);
  }
  CAPTURE(node0.output());
  CHECK(node0.output().find("control port 127.0.0.1:19280: refused a connection from ") != std::string::npos);
  // A socket that connects to the master's data port and sends: it gives
  // no rank's password, so its handshake is refused and nothing it sends is
  // read; it is counted and logged.
  {
    zmq::context_t context;
    zmq::socket_t forger(context, zmq::socket_type::push);
    forger.set(zmq::sockopt::linger, 1000);
    forger.connect("tcp://127.0.0.1:19281");
    uint32_t frame[4] = {0x5441444c, 1, 3, 0};  // the unkeyed data plane's header, claiming rank 1
    (void)forger.send(zmq::buffer(frame, sizeof frame), zmq::send_flags::dontwait);
    for (int i = 0; i < 100 && node0.output().find("data port 127.0.0.1:19281: refused") == std::string::npos; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(node0.output().find("rank 0: data port 127.0.0.1:19281: refused a connection from 127.0.0.1:") !=
        std::string::npos);
  CHECK(node0.output().find("data-plane message") == std::string::npos);
  // The key holder joins, and the job runs.
  Agent node1("--machines " + machines + " --rank 1 --key " + key, (dir / "b3.log").string());
  Ran ran = run_rill("submit " + root() + "/samples/linear_regression/linear_regression.json --master "
                     "127.0.0.1:19280 --steps 20 --key " + key, 120);
  CHECK_MESSAGE(ran.code == 0, ran.output);
  if (ran.code != 0) MESSAGE("node 0:\n" << node0.output() << "\nnode 1:\n" << node1.output());
  ::setenv("RILL_KEY_FILE", key.c_str(), 1);
  auto client = rill::Client::connect("127.0.0.1:19280", 10);
  REQUIRE(client.ok());
  CHECK((*client)->shutdown().ok());
  ::unsetenv("RILL_KEY_FILE");
  CHECK(node0.wait(15) == 0);
}

TEST_CASE("an agent will not listen beyond loopback without a key, unless --insecure") {
  NoKeyInEnvironment clean;
  // 192.0.2.1 (TEST-NET-1) is no address of this machine: the refusal comes
  // before any bind.
  Ran ran = run_rill("agent --machines 192.0.2.1:19290 --rank 0 --http off");
  CHECK(ran.code != 0);
  CHECK(ran.output.find("will not listen on 192.0.2.1:19290 without a cluster key") != std::string::npos);
  CHECK(ran.output.find("--insecure") != std::string::npos);
  Ran insecure = run_rill("agent --machines 192.0.2.1:19290 --rank 0 --http off --insecure");
  CHECK(insecure.code != 0);  // now it tries, and the address is not this machine's
  CHECK(insecure.output.find("will not listen") == std::string::npos);
  CHECK(insecure.output.find("--insecure: listening on 192.0.2.1:19290 without a key") != std::string::npos);
}

namespace {

// A classifier reading a CSV file (x1, x2, label).
std::string csv_job(const std::string& csv) { return csv_classifier_job(csv); }

void write(const std::filesystem::path& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace

TEST_CASE("submitted jobs read data and write checkpoints only under each agent's allowed roots") {
  NoKeyInEnvironment clean;
  auto dir = temp_dir("rill-roots-");
  for (const char* sub : {"data0", "data1", "ckpt", "elsewhere"}) std::filesystem::create_directories(dir / sub);
  const std::string rows = "1,0,0\n0,1,1\n1,0,0\n0,1,1\n";
  write(dir / "data0" / "d.csv", rows);
  write(dir / "elsewhere" / "d.csv", rows);
  const std::string machines = "127.0.0.1:19340,127.0.0.2:19340";
  // Node 1 reads from data1 only: data0 is not its own.
  Agent node0("--machines " + machines + " --rank 0 --http off --data-root " + (dir / "data0").string() +
                  " --data-root " + (dir / "data1").string() + " --checkpoint-root " + (dir / "ckpt").string(),
              (dir / "r0.log").string());
  Agent node1("--machines " + machines + " --rank 1 --data-root " + (dir / "data1").string(),
              (dir / "r1.log").string());
  // Formed before the first submission, so its answer is the refusal, not
  // a master still waiting for node 1 (a loaded machine starts agents slowly).
  wait_formed("127.0.0.1:19340", "");
  auto submit = [&](const std::string& job_text, const std::string& extra) {
    write(dir / "job.json", job_text);
    return run_rill("submit " + (dir / "job.json").string() + " --master 127.0.0.1:19340 " + extra);
  };
  // Outside the master's roots: refused at submission, naming field, path and flag.
  Ran outside = submit(csv_job((dir / "elsewhere" / "d.csv").string()), "");
  CHECK(outside.code != 0);
  CHECK(outside.output.find("node 0 (127.0.0.1:19340): dataset 'train' path '" + (dir / "elsewhere" / "d.csv").string() +
                            "' is outside the folders this agent lets jobs use") != std::string::npos);
  CHECK(outside.output.find("--data-root") != std::string::npos);
  // A link inside a root that leads outside it is outside.
  std::filesystem::create_symlink(dir / "elsewhere" / "d.csv", dir / "data0" / "link.csv");
  Ran linked = submit(csv_job((dir / "data0" / "link.csv").string()), "");
  CHECK(linked.output.find("is outside the folders") != std::string::npos);
  // Checkpoints outside the checkpoint roots, and a resume from outside.
  Ran ckpt = submit(csv_job((dir / "data1" / "d.csv").string()), "--set checkpoint.dir=" + (dir / "elsewhere").string());
  CHECK(ckpt.output.find("checkpoint.dir '" + (dir / "elsewhere").string() + "' is outside") != std::string::npos);
  Ran resume = submit(csv_job((dir / "data1" / "d.csv").string()), "--resume " + (dir / "elsewhere").string());
  CHECK(resume.output.find("--resume") != std::string::npos);
  // Within the master's roots but not node 1's: node 1 refuses its part,
  // named, and nothing runs.
  Ran node1_refuses = submit(csv_job((dir / "data0" / "d.csv").string()), "");
  CHECK(node1_refuses.code != 0);
  CHECK(node1_refuses.output.find("node 1 (127.0.0.2:19340): dataset 'train' path") != std::string::npos);
  // Within everyone's: it runs, and writes its checkpoint.
  write(dir / "data1" / "d.csv", rows);
  Ran ok = submit(csv_job((dir / "data1" / "d.csv").string()),
                  "--set checkpoint.dir=" + (dir / "ckpt" / "run").string() + " --set checkpoint.every=5");
  CHECK_MESSAGE(ok.code == 0, ok.output);
  CHECK(std::filesystem::exists(dir / "ckpt" / "run" / "latest"));
  auto client = rill::Client::connect("127.0.0.1:19340", 10);
  REQUIRE(client.ok());
  CHECK((*client)->shutdown().ok());
  CHECK(node0.wait(15) == 0);
}

TEST_CASE("a keyed cluster's HTTP endpoint answers only holders of its token") {
  NoKeyInEnvironment clean;
  auto dir = temp_dir("rill-http-token-");
  const std::string key = keygen(dir / "cluster.key");
  Agent master("--machines 127.0.0.1:19515 --rank 0 --devices cpu:1 --http 127.0.0.1:19518 --key " + key,
               (dir / "t0.log").string());
  wait_formed("127.0.0.1:19515", key);
  Ran printed = run_rill("token --key " + key + " --http 127.0.0.1:19518");
  REQUIRE(printed.code == 0);
  const std::string token = printed.output.substr(0, printed.output.find('\n'));
  REQUIRE(token.size() == 32);
  CHECK(printed.output.find("http://127.0.0.1:19518/?token=" + token) != std::string::npos);
  CHECK(master.output().find("`rill token --key ") != std::string::npos);  // the log says how, not the token
  CHECK(master.output().find(token) == std::string::npos);
  httplib::Client http("127.0.0.1", 19518);
  for (const char* path : {"/metrics", "/api/status", "/", "/api/jobs/1", "/static/chart.min.js"}) {
    auto res = http.Get(path);
    REQUIRE(res);
    CHECK(res->status == 401);
    CHECK(res->body.find("needs its token: `rill token --key FILE` prints it") != std::string::npos);
  }
  auto wrong = http.Get("/metrics", httplib::Headers{{"Authorization", "Bearer " + std::string(32, '0')}});
  REQUIRE(wrong);
  CHECK(wrong->status == 401);
  CHECK(wrong->body.find("this is not the cluster's token") != std::string::npos);
  // Prometheus and curl send it as a bearer token.
  auto bearer = http.Get("/metrics", httplib::Headers{{"Authorization", "Bearer " + token}});
  REQUIRE(bearer);
  CHECK(bearer->status == 200);
  CHECK(bearer->body.find("rill_node_heartbeat_age_seconds") != std::string::npos);
  // A browser opens /?token=... once; the page's requests then carry the cookie.
  auto page = http.Get("/?token=" + token);
  REQUIRE(page);
  CHECK(page->status == 200);
  CHECK(page->get_header_value("Set-Cookie") == "rill_token=" + token + "; Path=/; HttpOnly; SameSite=Strict");
  auto api = http.Get("/api/status", httplib::Headers{{"Cookie", "theme=dark; rill_token=" + token}});
  REQUIRE(api);
  CHECK(api->status == 200);
  CHECK(api->body.find("\"nodes\"") != std::string::npos);
  ::setenv("RILL_KEY_FILE", key.c_str(), 1);
  auto client = rill::Client::connect("127.0.0.1:19515", 10);
  REQUIRE(client.ok());
  CHECK((*client)->shutdown().ok());
  ::unsetenv("RILL_KEY_FILE");
  CHECK(master.wait(15) == 0);
  // Without --key, a loopback agent makes this user's default key on first
  // use: its endpoint asks for that key's token, which `rill token` prints.
  Ran none_yet = run_rill("token");
  CHECK(none_yet.code != 0);
  CHECK(none_yet.output.find("no cluster key: give --key FILE or RILL_KEY_FILE") != std::string::npos);
  Agent plain("--machines 127.0.0.1:19515 --rank 0 --devices cpu:1 --http 127.0.0.1:19518", (dir / "t1.log").string());
  bool up = false;
  for (int i = 0; i < 200 && !up; ++i) {
    up = run_rill("status --master 127.0.0.1:19515").code == 0;  // the client finds the default key
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  REQUIRE_MESSAGE(up, plain.output());
  CHECK(plain.output().find("made a cluster key for this user's agents and clients on this machine: " +
                            (clean.config / "rill" / "cluster.key").string()) != std::string::npos);
  auto refused = http.Get("/metrics");
  REQUIRE(refused);
  CHECK(refused->status == 401);
  Ran default_token = run_rill("token --http 127.0.0.1:19518");
  REQUIRE_MESSAGE(default_token.code == 0, default_token.output);
  const std::string made_token = default_token.output.substr(0, default_token.output.find('\n'));
  CHECK(made_token != token);
  auto served = http.Get("/metrics", httplib::Headers{{"Authorization", "Bearer " + made_token}});
  REQUIRE(served);
  CHECK(served->status == 200);
  CHECK(run_rill("shutdown --master 127.0.0.1:19515").code == 0);
  CHECK(plain.wait(15) == 0);
}

TEST_CASE("the master queues at most 64 jobs and --max-message-bytes of job files; more is refused, named") {
  NoKeyInEnvironment clean;
  auto dir = temp_dir("rill-queue-bound-");
  const std::string key_file = keygen(dir / "cluster.key");
  Agent master("--machines 127.0.0.1:19550 --rank 0 --http off --devices cpu:1 --max-message-bytes 4194304 --key " +
                   key_file,
               (dir / "q0.log").string());
  wait_formed("127.0.0.1:19550", key_file);
  auto key = rill::comm::read_key_file(key_file);
  REQUIRE(key.ok());
  zmq::context_t context;
  zmq::socket_t client(context, zmq::socket_type::dealer);
  client.set(zmq::sockopt::linger, 0);
  client.set(zmq::sockopt::rcvtimeo, 20000);
  rill::comm::curve_client(client, *key, rill::comm::kClientIdentity, 0);
  client.connect("tcp://127.0.0.1:19550");
  std::ifstream in(root() + "/samples/linear_regression/linear_regression.json");
  const std::string job((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Submits without waiting for the job, as many clients would; the reply.
  auto submit = [&](const std::string& text, int64_t steps) {
    rill::control::Submit m;
    m.job_text = text;
    m.file_name = "linear_regression.json";
    m.steps = steps;
    const std::string bytes = rill::control::encode(m);
    (void)client.send(zmq::buffer(bytes), zmq::send_flags::none);
    zmq::message_t answer;
    REQUIRE(client.recv(answer));
    auto decoded = rill::control::decode(answer.to_string_view());
    REQUIRE(decoded.ok());
    auto* reply = std::get_if<rill::control::SubmitReply>(&*decoded);
    REQUIRE(reply != nullptr);
    return *reply;
  };
  // The first runs (long enough to hold the others back: the master starts
  // it before it reads the next message); 3 MB of job file waits; 3 MB more
  // would be over 4 MiB in all.
  CHECK(submit(job, 100000000).error.empty());
  const std::string padded = job + std::string(3000000, ' ');
  CHECK(submit(padded, 10).error.empty());
  auto over_bytes = submit(padded, 10);
  CHECK(over_bytes.job_id == 0);
  CHECK(over_bytes.error ==
        "the master's queue is full: 1 job(s) of " + std::to_string(padded.size()) +
            " bytes wait already (it holds at most 64 jobs and --max-message-bytes 4194304 bytes of job files); "
            "submit again when one has run");
  for (int i = 1; i < 64; ++i) REQUIRE(submit(job, 10).error.empty());
  auto over_count = submit(job, 10);
  CHECK(over_count.job_id == 0);
  CHECK(over_count.error.find("the master's queue is full: 64 job(s) of ") == 0);
  // A client that asks and never reads the answers fills its queue at the
  // master: what does not fit is dropped, counted and logged now and then,
  // and the master serves on.
  {
    zmq::socket_t deaf(context, zmq::socket_type::dealer);
    deaf.set(zmq::sockopt::linger, 0);
    rill::comm::curve_client(deaf, *key, rill::comm::kClientIdentity, 0);
    deaf.connect("tcp://127.0.0.1:19550");
    const std::string ask = rill::control::encode(rill::control::StatusRequest{});
    for (int i = 0; i < 30000; ++i) (void)deaf.send(zmq::buffer(ask), zmq::send_flags::none);
    for (int i = 0; i < 100 && master.output().find("answer(s) to clients that do not read them") == std::string::npos;
         ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(master.output().find("answer(s) to clients that do not read them") != std::string::npos);
  ::setenv("RILL_KEY_FILE", key_file.c_str(), 1);
  auto status = rill::Client::connect("127.0.0.1:19550", 10);
  REQUIRE(status.ok());
  auto text = (*status)->status();
  REQUIRE(text.ok());
  CHECK(nlohmann::json::parse(*text)["queued"].size() == 64);
  // Shutting down ends the running job too.
  CHECK((*status)->shutdown().ok());
  ::unsetenv("RILL_KEY_FILE");
  CHECK(master.wait(15) == 0);
  CHECK(master.output().find("job 1 failed: the cluster is shutting down") != std::string::npos);
}

TEST_CASE("--max-message-bytes: a run whose regst or variables would not fit in one message fails naming them") {
  NoKeyInEnvironment clean;
  auto dir = temp_dir("rill-message-bound-");
  const std::string key = keygen(dir / "cluster.key");
  // The jobs' files in a folder of their own: no root may hold the key.
  const std::filesystem::path work = dir / "work";
  std::filesystem::create_directories(work);
  const std::string machines = "127.0.0.1:19360,127.0.0.2:19360", master = "127.0.0.1:19360";
  const std::string flags = " --devices cpu:2 --max-message-bytes 4194304 --key " + key + " --data-root " +
                            work.string() + " --data-root /usr/share --checkpoint-root " + work.string();
  Agent node0("--machines " + machines + " --rank 0 --http off" + flags, (dir / "m0.log").string());
  Agent node1("--machines " + machines + " --rank 1" + flags, (dir / "m1.log").string());
  wait_formed(master, key);
  auto submit = [&](const std::string& job, const std::string& extra) {
    return run_rill("submit " + job + " --master " + master + " --key " + key + extra, 120);
  };
  // The stages' boundary: 8192 rows x 512 floats a micro-batch, 8 MiB per device.
  Ran staged = submit(root() + "/samples/mlp/mlp_pipeline.json",
                      " --steps 1 --set train.batch_size=16384 --set train.micro_batches=2");
  CHECK(staged.code != 0);
  CAPTURE(staged.output);
  CHECK(staged.output.find("in one message, larger than the data plane takes (--max-message-bytes "
                           "4194304)") != std::string::npos);
  // A replicated 2 x 1M variable (8 MiB; its gradient crosses in pieces)
  // runs: node 1's replica stays there (the master holds the same piece).
  write(work / "d.csv", "1,0,0\n0,1,1\n1,0,0\n0,1,1\n");
  std::string wide = csv_job((work / "d.csv").string());
  const std::string narrow_w = R"({"name": "w", "shape": [2, 2],)";
  REQUIRE(wide.find(narrow_w) != std::string::npos);
  wide.replace(wide.find(narrow_w), narrow_w.size(), R"({"name": "w", "shape": [2, 1048576],)");
  write(dir / "wide.json", wide);
  Ran replicas = submit((dir / "wide.json").string(), " --steps 1");
  CHECK_MESSAGE(replicas.code == 0, replicas.output);
  // Split by column over the 4 devices, node 1's own pieces (2 x 2.2 MB)
  // must go back to the master at the end, and cannot in one message.
  std::string split = wide;
  split.replace(split.find(R"({"name": "w", "shape": [2, 1048576],)"), 36,
                R"J({"name": "w", "shape": [2, 1100000], "sbp": "S(1)",)J");
  write(dir / "split.json", split);
  Ran pieces = submit((dir / "split.json").string(), " --steps 1");
  CHECK(pieces.code != 0);
  CAPTURE(pieces.output);
  CHECK(pieces.output.find("node 1 (127.0.0.2:19360): its variables (4400000 bytes) do not fit in a control message "
                           "to the master (--max-message-bytes 4194304)") != std::string::npos);
  // It fails before anything runs: node 1 refused its plan.
  CHECK(pieces.output.find("step 1/") == std::string::npos);
  // Checkpointed with Adam, each node's pieces (2 x 2 MB) fit in a message
  // to the master, with their two moments (12 MB) they would not: the
  // checkpoint's pieces never go there (each node writes its own file), so
  // it is saved.
  const std::string split_w = R"J({"name": "w", "shape": [2, 1000000], "sbp": "S(1)",)J";
  const std::string ckpt = (work / "ckpt").string();
  std::string adam = wide;
  const std::string wide_w = R"({"name": "w", "shape": [2, 1048576],)";
  adam.replace(adam.find(wide_w), wide_w.size(), split_w);
  adam.replace(adam.find(R"("type": "sgd")"), 13, R"("type": "adam")");
  adam.replace(adam.rfind('}'), 1, R"(, "checkpoint": {"dir": ")" + ckpt + R"(", "every": 1}})");
  write(dir / "adam.json", adam);
  Ran saved = submit((dir / "adam.json").string(), " --steps 2");
  CHECK_MESSAGE(saved.code == 0, saved.output);
  CHECK(std::filesystem::exists(std::filesystem::path(ckpt) / "step-00000002" / "node-1.safetensors"));
  // Resuming from it would send all 8 MB of w to node 1 in the job's plan.
  std::string sgd = adam;
  sgd.replace(sgd.find(R"("type": "adam")"), 14, R"("type": "sgd")");
  write(dir / "sgd.json", sgd);
  Ran resumed = submit((dir / "sgd.json").string(), " --steps 3 --resume latest");
  CHECK(resumed.code != 0);
  CAPTURE(resumed.output);
  CHECK(resumed.output.find("the job with the values it starts from (") != std::string::npos);
  CHECK(resumed.output.find("does not fit in a control message to the other nodes (--max-message-bytes 4194304)") !=
        std::string::npos);
  // The cluster is whole and runs a job that fits.
  Ran fits = submit(root() + "/samples/linear_regression/linear_regression.json", " --steps 20");
  CHECK_MESSAGE(fits.code == 0, fits.output);
  ::setenv("RILL_KEY_FILE", key.c_str(), 1);
  auto client = rill::Client::connect(master, 10);
  REQUIRE(client.ok());
  CHECK((*client)->shutdown().ok());
  ::unsetenv("RILL_KEY_FILE");
  CHECK(node0.wait(15) == 0);
}

// A bucket of gradients is larger than any one regst; its all-reduce's
// messages are pieces of the bucket. The run's bound on data-plane messages
// counts buckets whole: a 330-layer MLP of width 32 at batch 4096 (its
// bucket 1.4 MB, its largest regst 512 KiB) once saw them dropped as
// malformed, and its all-reduce waited out its deadline. The agents are
// apart: the bound is the TCP path's (shared memory has none to check).
TEST_CASE("a deep MLP whose gradient bucket is larger than any regst trains on 2 keyed agents") {
  auto dir = temp_dir("rill-deep-bucket-");
  const std::string job = (dir / "deep.json").string();
  REQUIRE(run_shell("/usr/bin/python3 " + root() + "/bench/deep_mlp.py " + job + " 330 32 4096").code == 0);
  Ran ran = run_rill("run " + job + " --nodes 2 --apart --devices cpu:1 --steps 3 --ctrl-port 19370 --http 127.0.0.1:0 "
                     "--stall-timeout 20 --logdir " + (dir / "logs").string(), 120);
  INFO(ran.output);
  CHECK(ran.code == 0);
  CHECK(ran.output.find("done: 3 steps") != std::string::npos);
  CHECK(ran.output.find("malformed") == std::string::npos);
  CHECK(read_text((dir / "logs" / "node-1.log").string()).find("malformed") == std::string::npos);
}

TEST_CASE("files rill writes in a folder every user may write are never written through a planted link") {
  // A folder like /tmp (mode 1777): another user plants links named as the
  // result and metrics files a user is about to ask for.
  const auto dir = temp_dir("rill-planted-");
  const auto shared = dir / "shared";
  std::filesystem::create_directories(shared);
  std::filesystem::permissions(shared, std::filesystem::perms::all | std::filesystem::perms::sticky_bit);
  const auto precious = dir / "precious";
  std::ofstream(precious) << "keep";
  for (const char* name : {"result.json", "metrics.jsonl"}) std::filesystem::create_symlink(precious, shared / name);
  const std::string job = root() + "/samples/linear_regression/linear_regression.json --set train.steps=5";
  Ran result = run_rill("run " + job + " --result " + (shared / "result.json").string());
  CHECK(result.code != 0);
  CHECK(result.output.find("is a symbolic link in " + shared.string()) != std::string::npos);
  Ran metrics = run_rill("run " + job + " --metrics " + (shared / "metrics.jsonl").string());
  CHECK(metrics.code != 0);
  CHECK(metrics.output.find("the metrics file '" + (shared / "metrics.jsonl").string() + "' is a symbolic link") !=
        std::string::npos);
  std::ifstream in(precious);
  CHECK(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()) == "keep");
}
