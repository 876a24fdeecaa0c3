// The master's HTTP endpoint binds its port again while the last one's
// connections linger in TIME-WAIT (an agent restarted on its port), and
// still refuses a port another socket listens on; a connection that sends
// its headers slowly is closed at the header deadline, and a flood of idle
// connections from one address holds only that address's share.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "runtime/watch/http_server.h"

namespace rill {
namespace {

using Clock = std::chrono::steady_clock;

// A connection to 127.0.0.1:port (from `source`, a loopback address), or -1.
int connect_to(int port, const char* source = nullptr) {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s >= 0 && source != nullptr) {
    sockaddr_in from{};
    from.sin_family = AF_INET;
    inet_pton(AF_INET, source, &from.sin_addr);
    if (bind(s, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0) {
      close(s);
      return -1;
    }
  }
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(static_cast<uint16_t>(port));
  if (s >= 0 && connect(s, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0) return s;
  if (s >= 0) close(s);
  return -1;
}

TEST_CASE("the HTTP endpoint binds its port again while its last connections are in TIME-WAIT, not one in use") {
  MetricsBoard board;
  auto first = HttpServer::start("127.0.0.1", 0, board);
  REQUIRE_MESSAGE(first.ok(), first.status().to_string());
  const int port = (*first)->port();
  // A request that asks the server to close: its end of the connection
  // stays in TIME-WAIT on the port once the server is gone.
  const int client = connect_to(port);
  REQUIRE(client >= 0);
  const timeval wait{10, 0};  // never hangs the test
  setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  REQUIRE(write(client, request.data(), request.size()) == static_cast<ssize_t>(request.size()));
  char buffer[4096];
  std::string answer;
  for (ssize_t n; (n = read(client, buffer, sizeof(buffer))) > 0;) answer.append(buffer, static_cast<size_t>(n));
  CHECK(answer.rfind("HTTP/1.1 200", 0) == 0);  // the whole answer, then the server's close
  close(client);
  // While it listens, the port is refused, naming it.
  auto taken = HttpServer::start("127.0.0.1", port, board);
  REQUIRE_FALSE(taken.ok());
  CHECK(taken.status().code() == Code::kUnavailable);
  CHECK(taken.status().message().find(std::to_string(port)) != std::string::npos);
  first->reset();
  auto again = HttpServer::start("127.0.0.1", port, board);
  REQUIRE_MESSAGE(again.ok(), again.status().to_string());
  CHECK((*again)->port() == port);
}

// Whether the server closed `fd` within `seconds` (reads what it sends).
bool closed_within(int fd, double seconds) {
  const timeval wait{0, 100000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  char buffer[4096];
  while (Clock::now() < deadline) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
  }
  return false;
}

TEST_CASE("the HTTP endpoint closes a connection whose headers are not in by the header deadline") {
  MetricsBoard board;
  auto server = HttpServer::start("127.0.0.1", 0, board);
  REQUIRE_MESSAGE(server.ok(), server.status().to_string());
  const int slow = connect_to((*server)->port());
  REQUIRE(slow >= 0);
  const timeval wait{0, 1000};
  setsockopt(slow, SOL_SOCKET, SO_SNDTIMEO, &wait, sizeof(wait));
  const auto start = Clock::now();
  // A header line every 250 ms, for at most 15 s: never idle, never done.
  const std::string first = "GET /metrics HTTP/1.1\r\n";
  bool closed = send(slow, first.data(), first.size(), MSG_NOSIGNAL) < 0;
  for (int line = 0; line < 60 && !closed; ++line) {
    const std::string header = "X-Slow-" + std::to_string(line) + ": 1\r\n";
    closed = send(slow, header.data(), header.size(), MSG_NOSIGNAL) < 0 || closed_within(slow, 0.25);
  }
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  close(slow);
  CHECK(closed);
  CHECK(took > 4.0);   // not before the deadline (5 s)
  CHECK(took < 10.0);  // and soon after it
}

TEST_CASE("the HTTP endpoint keeps a flood of idle connections from one address to its share; others are served") {
  MetricsBoard board;
  auto server = HttpServer::start("127.0.0.1", 0, board);
  REQUIRE_MESSAGE(server.ok(), server.status().to_string());
  const int port = (*server)->port();
  std::vector<int> flood;
  for (int i = 0; i < 100; ++i) {
    const int fd = connect_to(port, "127.0.0.2");
    REQUIRE(fd >= 0);
    flood.push_back(fd);
  }
  // From another address, a request is answered at once.
  const auto start = Clock::now();
  const int client = connect_to(port);
  REQUIRE(client >= 0);
  const timeval wait{5, 0};  // never hangs the test
  setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  REQUIRE(write(client, request.data(), request.size()) == static_cast<ssize_t>(request.size()));
  char buffer[4096];
  std::string answer;
  for (ssize_t n; (n = read(client, buffer, sizeof(buffer))) > 0;) answer.append(buffer, static_cast<size_t>(n));
  close(client);
  CHECK(answer.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(std::chrono::duration<double>(Clock::now() - start).count() < 2.0);
  // All but the address's share (16) were closed at once.
  int closed = 0;
  for (int fd : flood) closed += closed_within(fd, 0.01) ? 1 : 0;
  for (int fd : flood) close(fd);
  CHECK(closed >= 100 - 16);
}

}  // namespace
}  // namespace rill
