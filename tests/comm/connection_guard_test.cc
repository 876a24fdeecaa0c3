// ConnectionGuard (comm/connection_guard.h): which connections it cuts,
// counting young ones (the control port) or every open one (the data port),
// and that a cut is a shutdown of a connection accepted on its port only.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <vector>

#include <doctest/doctest.h>

#include "comm/connection_guard.h"

using namespace rill::comm;
using namespace std::chrono_literals;
using Clock = ConnectionGuard::Clock;

TEST_CASE("counting young connections, the oldest over a limit is cut, and those past the window no longer count") {
  ConnectionLimits limits;
  limits.per_address = 2;
  limits.total = 3;
  limits.young = 3000ms;
  ConnectionGuard guard("test port", 1, limits);
  const auto t0 = Clock::now();
  CHECK(guard.admit(10, "10.0.0.1", t0).empty());
  CHECK(guard.admit(11, "10.0.0.1", t0 + 10ms).empty());
  // A third from the same address: its oldest goes.
  CHECK(guard.admit(12, "10.0.0.1", t0 + 20ms) == std::vector<int>{10});
  // Others' addresses have their own share, up to the total: then the
  // oldest of all goes.
  CHECK(guard.admit(20, "10.0.0.2", t0 + 30ms).empty());
  CHECK(guard.admit(21, "10.0.0.2", t0 + 40ms) == std::vector<int>{11});
  CHECK(guard.counted() == 3);
  // A closed connection counts no more.
  guard.closed(12);
  CHECK(guard.counted() == 2);
  // Past the window (its handshake is over), nothing counts: a key holder's
  // connection is never cut for the floods that come after it.
  CHECK(guard.admit(30, "10.0.0.1", t0 + 4000ms).empty());
  CHECK(guard.counted() == 1);
  CHECK(guard.admit(31, "10.0.0.1", t0 + 4001ms).empty());
  CHECK(guard.cut() == 2);
}

TEST_CASE("counting every open connection, a new one over a limit is the one cut") {
  ConnectionLimits limits;
  limits.per_address = 2;
  limits.total = 3;
  ConnectionGuard guard("test port", 1, limits);
  const auto t0 = Clock::now();
  CHECK(guard.admit(10, "10.0.0.1", t0).empty());
  CHECK(guard.admit(11, "10.0.0.1", t0).empty());
  CHECK(guard.admit(12, "10.0.0.1", t0 + 1h) == std::vector<int>{12});  // the ranks that came first keep theirs
  CHECK(guard.admit(20, "10.0.0.2", t0).empty());
  CHECK(guard.admit(30, "10.0.0.3", t0) == std::vector<int>{30});
  guard.closed(10);
  CHECK(guard.admit(31, "10.0.0.3", t0).empty());
  CHECK(guard.counted() == 3);
}

namespace {

int listen_loopback(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(listen(fd, 16) == 0);
  socklen_t size = sizeof address;
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) == 0);
  *port = ntohs(address.sin_port);
  return fd;
}

int connect_loopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(static_cast<uint16_t>(port));
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0);
  const timeval wait{5, 0};  // never hangs the test
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  return fd;
}

// Whether the other end ended the connection within `wait_ms`.
bool ended(int fd, int wait_ms) {
  pollfd item{fd, POLLIN, 0};
  if (poll(&item, 1, wait_ms) <= 0) return false;
  char byte;
  return recv(fd, &byte, 1, MSG_DONTWAIT) == 0;
}

}  // namespace

TEST_CASE("with addresses admitted, a connection from any other is cut at once and counts toward nothing") {
  ConnectionLimits limits;
  limits.per_address = 1;
  limits.total = 2;
  limits.admitted = {"10.0.0.1", "10.0.0.2"};
  ConnectionGuard guard("test port", 1, limits);
  const auto t0 = Clock::now();
  for (int fd = 100; fd < 110; ++fd) CHECK(guard.admit(fd, "10.0.0.9", t0) == std::vector<int>{fd});
  CHECK(guard.counted() == 0);  // the machines' own share and the total are untouched
  CHECK(guard.admit(10, "10.0.0.1", t0).empty());
  CHECK(guard.admit(20, "10.0.0.2", t0).empty());
  CHECK(guard.cut() == 10);
}

// A rank that moved (Transport::set_peer_endpoint): the guard admits the
// ranks' addresses as they are now, not every address one ever had; a
// guard that admits every address stays so.
TEST_CASE("the admitted addresses are replaced as ranks move, and a guard admitting all stays so") {
  ConnectionLimits limits;
  limits.admitted = {"10.0.0.1", "10.0.0.2"};
  ConnectionGuard guard("test port", 1, limits);
  const auto t0 = Clock::now();
  guard.set_admitted({"10.0.0.1", "10.0.0.9"});  // rank 1 from 10.0.0.2 to 10.0.0.9
  CHECK(guard.admit(10, "10.0.0.9", t0).empty());
  CHECK(guard.admit(11, "10.0.0.2", t0) == std::vector<int>{11});
  CHECK(guard.admit(12, "10.0.0.1", t0).empty());
  ConnectionGuard open("test port", 1, ConnectionLimits{});
  open.set_admitted({"10.0.0.1"});
  CHECK(open.admit(10, "10.0.0.7", t0).empty());
}

TEST_CASE("a cut shuts down a connection accepted on the guard's port, and nothing else") {
  int port = 0, other_port = 0;
  const int listener = listen_loopback(&port), other_listener = listen_loopback(&other_port);
  const int first = connect_loopback(port), second = connect_loopback(port), elsewhere = connect_loopback(other_port);
  const int accepted_first = accept(listener, nullptr, nullptr), accepted_second = accept(listener, nullptr, nullptr);
  const int accepted_elsewhere = accept(other_listener, nullptr, nullptr);
  REQUIRE((accepted_first >= 0 && accepted_second >= 0 && accepted_elsewhere >= 0));
  CHECK(socket_peer_address(accepted_first, false) == "127.0.0.1");
  CHECK(socket_peer_address(accepted_first).rfind("127.0.0.1:", 0) == 0);
  ConnectionLimits limits;
  limits.per_address = 1;
  limits.young = 10s;
  ConnectionGuard guard("test port", port, limits);
  // A descriptor the guard takes for its port's that is in truth another
  // port's connection (a number reused since) is left alone.
  guard.accepted(accepted_elsewhere, Clock::now());
  guard.accepted(accepted_first, Clock::now());
  CHECK(guard.cut() == 1);
  CHECK_FALSE(ended(elsewhere, 200));
  // Two of this port's from one address: the oldest is shut down, and
  // stays this process's descriptor to close.
  guard.accepted(accepted_second, Clock::now());
  CHECK(guard.cut() == 2);
  CHECK(ended(first, 2000));
  CHECK_FALSE(ended(second, 200));
  CHECK(fcntl(accepted_first, F_GETFD) != -1);
  for (int fd : {listener, other_listener, first, second, elsewhere, accepted_first, accepted_second,
                 accepted_elsewhere})
    close(fd);
}

TEST_CASE("a descriptor reused for another connection from the same address since it was counted is not cut") {
  int port = 0;
  const int listener = listen_loopback(&port);
  const int old_client = connect_loopback(port);
  const int counted = accept(listener, nullptr, nullptr);
  REQUIRE(counted >= 0);
  ConnectionLimits limits;
  limits.per_address = 1;
  limits.young = 10s;
  ConnectionGuard guard("test port", port, limits);
  guard.accepted(counted, Clock::now());
  // ZeroMQ closes the counted connection, and before the guard hears of it
  // the number comes back for a new peer's connection on the same port.
  const int reused_client = connect_loopback(port);
  const int fresh = accept(listener, nullptr, nullptr);
  REQUIRE(fresh >= 0);
  REQUIRE(dup2(fresh, counted) == counted);
  close(fresh);
  // A third connection from the address puts it over its share: the guard
  // cuts its oldest counted one by number, which is now the reused one's.
  const int third_client = connect_loopback(port);
  const int third = accept(listener, nullptr, nullptr);
  REQUIRE(third >= 0);
  guard.accepted(third, Clock::now());
  CHECK(guard.cut() == 1);
  CHECK_FALSE(ended(reused_client, 200));
  CHECK(ended(old_client, 2000));  // its descriptor was closed by the dup2
  for (int fd : {listener, old_client, counted, reused_client, third_client, third}) close(fd);
}
