// What a peer can hold of a real agent's ports: a flood of idle and slow
// connections without the key (control, data and HTTP ports) holds no more
// than its bounds and keeps no key holder from an answer; a client that
// takes node 1's old routing id first, or sends a Join as node 1, keeps
// node 1 out of nothing; and a routing id a peer chose reaches the log
// escaped and cut short.
//
// The floods come from 127.0.0.3, the key holders from 127.0.0.1: the
// bounds are per source address, and a flood from the holder's own address
// is bounded only by the totals and the timeouts (docs/SECURITY.md).
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <zmq.hpp>

#include "comm/cluster_key.h"
#include "runtime/cluster/client.h"
#include "runtime/cluster/control_codec.h"
#include "tests/e2e/key_util.h"
#include "tests/e2e/process_util.h"

using namespace rill::testing;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// This process's open-file limit raised to its hard limit (and that, as
// root, to `needed`): the floods below hold about 1,600 connections at once.
void allow_open_files(rlim_t needed) {
  rlimit limit{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &limit) == 0);
  if (limit.rlim_max < needed) {
    rlimit raised{needed, needed};
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  REQUIRE_MESSAGE(limit.rlim_max >= needed, "this test holds about 1,600 connections: raise the hard limit of open "
                                            "files (ulimit -Hn) to at least " << needed);
  limit.rlim_cur = limit.rlim_max;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &limit) == 0);
}

// ZMTP 3.0's greeting for the NULL mechanism, then READY as a PUSH socket:
// a stranger's handshake, which a keyed data port refuses (it gives no
// rank's password).
std::string zmtp_null_handshake() {
  std::string greeting(64, '\0');
  greeting[0] = '\xff';
  greeting[9] = '\x7f';
  greeting[10] = 3;  // version 3.0
  greeting.replace(12, 4, "NULL");
  const std::string ready = std::string("\x04\x1a\x05READY\x0bSocket-Type\x00\x00\x00\x04PUSH", 28);
  return greeting + ready;
}

// Connections to 127.0.0.1 from another loopback address, opened without
// waiting: idle ones, and slow ones that send their bytes a piece at a time.
// Every descriptor is closed when it goes, the dripping thread stopped.
class Flood {
 public:
  explicit Flood(std::string source) : source_(std::move(source)) {}
  ~Flood() {
    stop_ = true;
    if (dripper_.joinable()) dripper_.join();
    for (int fd : fds_) ::close(fd);
  }
  Flood(const Flood&) = delete;
  Flood& operator=(const Flood&) = delete;

  // `count` connections that send `opening` once connected (within 5 s),
  // then nothing.
  void idle(int port, int count, const std::string& opening = "") {
    std::vector<int> opened;
    for (int i = 0; i < count; ++i) opened.push_back(open(port));
    if (opening.empty()) return;
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    std::vector<int> waiting = opened;
    while (!waiting.empty() && Clock::now() < deadline) {
      std::vector<pollfd> items;
      for (int fd : waiting) items.push_back({fd, POLLOUT, 0});
      ::poll(items.data(), items.size(), 100);
      std::vector<int> still;
      for (const pollfd& item : items) {
        if (!(item.revents & (POLLOUT | POLLERR | POLLHUP))) {
          still.push_back(item.fd);
          continue;
        }
        (void)::send(item.fd, opening.data(), opening.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      waiting = std::move(still);
    }
  }
  // `count` connections that send one of `pieces` every tick of drip().
  void slow(int port, int count, std::vector<std::string> pieces) {
    for (int i = 0; i < count; ++i) slow_.push_back({open(port), pieces, 0});
  }
  // Sends the slow connections' pieces, one each every `every`, until the
  // flood goes (or 120 s pass).
  void drip(std::chrono::milliseconds every) {
    dripper_ = std::thread([this, every] {
      const auto end = Clock::now() + std::chrono::seconds(120);
      while (!stop_ && Clock::now() < end) {
        for (Slow& s : slow_) {
          if (s.dead || s.next >= s.pieces.size()) continue;
          const std::string& piece = s.pieces[s.next];
          const ssize_t sent = ::send(s.fd, piece.data(), piece.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
          if (sent == static_cast<ssize_t>(piece.size())) ++s.next;
          else if (sent < 0 && errno != EAGAIN && errno != ENOTCONN && errno != EINPROGRESS) s.dead = true;
        }
        std::this_thread::sleep_for(every);
      }
    });
  }

 private:
  struct Slow {
    int fd;
    std::vector<std::string> pieces;
    size_t next;
    bool dead = false;
  };
  int open(int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    REQUIRE(fd >= 0);
    fds_.push_back(fd);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    inet_pton(AF_INET, source_.c_str(), &from.sin_addr);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) == 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    const int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to);
    REQUIRE((rc == 0 || errno == EINPROGRESS));
    return fd;
  }

  std::string source_;
  std::vector<int> fds_;
  std::vector<Slow> slow_;
  std::thread dripper_;
  std::atomic<bool> stop_{false};
};

// How many sockets process `pid` has open (at most 100,000 looked at).
int open_sockets(pid_t pid) {
  int sockets = 0, looked = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", error)) {
    if (++looked > 100000) break;
    std::error_code unreadable;
    const auto target = std::filesystem::read_symlink(entry.path(), unreadable);
    if (!unreadable && target.string().rfind("socket:", 0) == 0) ++sockets;
  }
  return sockets;
}

// A key holder's status over the control port, and how long it took.
std::pair<bool, double> timed_status(const std::string& master) {
  const auto start = Clock::now();
  auto client = rill::Client::connect(master, 2.0, true);
  if (!client.ok()) return {false, seconds_since(start)};
  auto status = (*client)->status();
  if (!status.ok()) MESSAGE("status: " << status.status().to_string());
  return {status.ok(), seconds_since(start)};
}

// A token holder's GET /api/status, and how long it took.
std::pair<bool, double> timed_get(int port, const std::string& token) {
  const auto start = Clock::now();
  httplib::Client http("127.0.0.1", port);
  http.set_connection_timeout(2);
  http.set_read_timeout(2);
  http.set_write_timeout(2);
  auto res = http.Get("/api/status", httplib::Headers{{"Authorization", "Bearer " + token}});
  return {res && res->status == 200 && res->body.find("\"nodes\"") != std::string::npos, seconds_since(start)};
}

}  // namespace

TEST_CASE("a flood without the key holds only its bounds of the control, data and HTTP ports; key holders are "
          "answered within 2 s") {
  allow_open_files(4096);
  NoKeyInEnvironment clean;
  auto dir = temp_dir("rill-flood-");
  const std::string key = keygen(dir / "cluster.key");
  const std::string machines = "127.0.0.1:19800,127.0.0.2:19800", master = "127.0.0.1:19800";
  // Node 0 may open 1,024 files, many distributions' default soft limit:
  // the flood below, unbounded, would take them all.
  Agent node0("--machines " + machines + " --rank 0 --devices cpu:1 --http 127.0.0.1:19808 --key " + key,
              (dir / "f0.log").string(), "prlimit --nofile=1024:");
  Agent node1("--machines " + machines + " --rank 1 --devices cpu:1 --key " + key, (dir / "f1.log").string());
  wait_formed(master, key);
  Ran printed = run_rill("token --key " + key);
  REQUIRE(printed.code == 0);
  const std::string token = printed.output.substr(0, printed.output.find('\n'));
  ::setenv("RILL_KEY_FILE", key.c_str(), 1);  // the C++ client reads it
  {
    Flood flood("127.0.0.3");
    // The slow ones first, so that they are the ones a server takes in.
    std::vector<std::string> greeting_bytes, header_lines{"GET /api/status HTTP/1.1\r\n", "Host: 127.0.0.1\r\n"};
    for (char c : zmtp_null_handshake().substr(0, 64)) greeting_bytes.push_back(std::string(1, c));
    for (int i = 0; i < 200; ++i) header_lines.push_back("X-Slow-" + std::to_string(i) + ": 1\r\n");
    flood.slow(19800, 20, greeting_bytes);
    flood.slow(19808, 20, header_lines);
    flood.idle(19800, 500);
    flood.idle(19808, 500);
    flood.idle(19801, 500, zmtp_null_handshake());  // the data port: a stranger's handshake, refused
    flood.drip(std::chrono::milliseconds(500));
    for (int round = 0; round < 2; ++round) {
      CAPTURE(round);
      const auto [answered, took] = timed_status(master);
      CHECK(answered);
      CHECK(took < 2.0);
      const auto [served, served_in] = timed_get(19808, token);
      CHECK(served);
      CHECK(served_in < 2.0);
      // The slow connections have sent a few pieces each by the second round.
      if (round == 0) std::this_thread::sleep_for(std::chrono::seconds(3));
    }
    int sockets = 0;
    CHECK_MESSAGE(Terminal::poll_until([&] { return (sockets = open_sockets(node0.pid)) < 200; }, 10.0),
                  "node 0 holds " << sockets << " sockets");
  }
  ::unsetenv("RILL_KEY_FILE");
  CAPTURE(node0.output());
  CHECK(node0.output().find("control port 127.0.0.1:19800: cut ") != std::string::npos);
  // The data port refuses each handshake; connections that come faster than
  // they are refused are cut over the address's share.
  CHECK(node0.output().find("data port 127.0.0.1:19801: refused a connection from 127.0.0.3:") != std::string::npos);
  rlimit limit{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &limit) == 0);
  if (limit.rlim_max > 1024)
    CHECK(node0.output().find("open-file limit raised from 1024 to " + std::to_string(limit.rlim_max)) !=
          std::string::npos);
  // Once the flood is gone the cluster is whole: a job runs on both nodes.
  Ran ran = run_rill("submit " + root() + "/samples/linear_regression/linear_regression.json --master " + master +
                         " --steps 20 --key " + key,
                     120);
  CHECK_MESSAGE(ran.code == 0, ran.output);
  CHECK(run_rill("shutdown --master " + master + " --key " + key).code == 0);
  CHECK(node0.wait(15) == 0);
  CHECK(node1.wait(15) == 0);
}

TEST_CASE("a client that holds 'node-1' first, or asks to join as node 1, keeps node 1 out of nothing; peers' "
          "routing ids are logged escaped and cut short") {
  NoKeyInEnvironment clean;
  auto dir = temp_dir("rill-squat-");
  const std::string key_file = keygen(dir / "cluster.key");
  const std::string machines = "127.0.0.1:19810,127.0.0.2:19810", master = "127.0.0.1:19810";
  Agent node0("--machines " + machines + " --rank 0 --http off --join-timeout 60 --key " + key_file,
              (dir / "s0.log").string());
  auto key = rill::comm::read_key_file(key_file);
  REQUIRE(key.ok());
  zmq::context_t context;
  // A client (it holds the key) that took the routing id node 1 used to
  // connect with, before node 1 started.
  zmq::socket_t squatter(context, zmq::socket_type::dealer);
  squatter.set(zmq::sockopt::linger, 0);
  squatter.set(zmq::sockopt::routing_id, "node-1");
  rill::comm::curve_client(squatter, *key, rill::comm::kClientIdentity, 0);
  squatter.connect("tcp://" + master);
  const std::string status_request = rill::control::encode(rill::control::StatusRequest{});
  (void)squatter.send(zmq::buffer(status_request), zmq::send_flags::none);
  // Its message is refused (a client cannot speak as a node), which says
  // its connection holds the routing id.
  CHECK(Terminal::poll_until(
      [&] { return node0.output().find("refused a control message from 'node-1' authenticated as 'client'") !=
                   std::string::npos; },
      20.0));
  // A client whose routing id would clear the screen and forge a log line,
  // and that asks to join as node 1, and then sends what is not a message.
  const std::string strange = "\x1b[2J\nforged: line " + std::string(200, 'A');
  zmq::socket_t stranger(context, zmq::socket_type::dealer);
  stranger.set(zmq::sockopt::linger, 0);
  stranger.set(zmq::sockopt::routing_id, strange);
  stranger.set(zmq::sockopt::rcvtimeo, 20000);
  rill::comm::curve_client(stranger, *key, rill::comm::kClientIdentity, 0);
  stranger.connect("tcp://" + master);
  rill::control::Join join;
  join.rank = 1;
  join.version = rill::control::kRillVersion;
  join.schema_hash = rill::control::schema_hash();
  join.devices = "cpu:1";
  join.machines = machines;
  (void)stranger.send(zmq::buffer(rill::control::encode(join)), zmq::send_flags::none);
  zmq::message_t answer;
  REQUIRE(stranger.recv(answer));
  auto reply = rill::control::decode(answer.to_string_view());
  REQUIRE(reply.ok());
  auto* join_reply = std::get_if<rill::control::JoinReply>(&*reply);
  REQUIRE(join_reply != nullptr);
  CHECK_FALSE(join_reply->ok);
  CHECK(join_reply->error.find("asked to join as rank 1") != std::string::npos);
  (void)stranger.send(zmq::str_buffer("not a control message"), zmq::send_flags::none);
  // Node 1 joins all the same.
  Agent node1("--machines " + machines + " --rank 1 --key " + key_file, (dir / "s1.log").string());
  wait_formed(master, key_file);
  CHECK(Terminal::poll_until(
      [&] { return node0.output().find("ignoring a corrupt control message from") != std::string::npos; }, 20.0));
  const std::string log = node0.output();
  CAPTURE(log);
  // Its first 64 bytes, escaped, and its length.
  const size_t prefix = strange.size() - 200;
  CHECK(log.find("from '\\x1b[2J\\x0aforged: line " + std::string(64 - prefix, 'A') + "... (" +
                 std::to_string(strange.size()) + " bytes)'") != std::string::npos);
  CHECK(log.find("\x1b[2J") == std::string::npos);
  CHECK(log.find("\nforged") == std::string::npos);
  CHECK(run_rill("shutdown --master " + master + " --key " + key_file).code == 0);
  CHECK(node0.wait(15) == 0);
  CHECK(node1.wait(15) == 0);
}
