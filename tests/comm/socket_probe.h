// Plain TCP connections that probe a data port's guard: made from a chosen
// loopback address, and watched for the listener cutting them.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

namespace rill::comm::testing {

// A plain TCP connection from `from` (port chosen by the kernel) to
// `to`:`port`; -1 when it cannot be made.
inline int connect_from(const char* from, const char* to, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in source{}, target{};
  source.sin_family = target.sin_family = AF_INET;
  ::inet_pton(AF_INET, from, &source.sin_addr);
  ::inet_pton(AF_INET, to, &target.sin_addr);
  target.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&source), sizeof source) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&target), sizeof target) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Whether the other end closed `fd` within `ms` (end of stream, or reset),
// reading what it sent before (ZMTP's greeting).
inline bool closed_within(int fd, int ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  // Each pass reads what came or ends: bounded by the deadline.
  for (auto now = std::chrono::steady_clock::now(); now < until; now = std::chrono::steady_clock::now()) {
    pollfd p{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count();
    if (::poll(&p, 1, static_cast<int>(left) + 1) <= 0) return false;
    char bytes[256];
    const ssize_t n = ::recv(fd, bytes, sizeof bytes, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return true;
  }
  return false;
}

}  // namespace rill::comm::testing
