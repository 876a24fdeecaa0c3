// The master's HTTP endpoint binds its port again while the last one's
// connections linger in TIME-WAIT (an agent restarted on its port), and
// still refuses a port another socket listens on.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <string>

#include "runtime/watch/http_server.h"

namespace rill {
namespace {

// A connection to 127.0.0.1:port, or -1.
int connect_to(int port) {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
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

}  // namespace
}  // namespace rill
