// Helpers for multi-rank comm tests: ranks are threads of this process, over
// real loopback ZeroMQ (127.0.0.1, ports the kernel reports free) or over the
// in-process transport.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "comm/transport.h"

namespace rill::comm::testing {

// In-process queues; ZeroMQ over TCP; ZeroMQ with shared memory between the
// ranks of one machine (all of a test's ranks are on 127.0.0.1).
enum class Kind { kInproc, kZmq, kShm };
inline constexpr Kind kAllKinds[] = {Kind::kInproc, Kind::kZmq, Kind::kShm};

inline const char* kind_name(Kind kind) {
  return kind == Kind::kInproc ? "inproc" : kind == Kind::kZmq ? "zmq tcp" : "zmq shared memory";
}

inline ZmqOptions tcp_only() {
  ZmqOptions options;
  options.shared_memory = false;
  return options;
}

// `n` distinct TCP ports that were free a moment ago, drawn at random from
// 21000-32767: below the kernel's ephemeral range (32768-60999 by default),
// so no connection's source port (this process's or another's) takes one
// between the pick and the bind, nor can a rank that dials a peer not yet
// listening connect to itself from the peer's port (a TCP self-connect:
// its handshake with itself fails); above the fixed ports the tests of
// agents take (18700-20000).
inline std::vector<int> free_ports(int n) {
  constexpr int kLowest = 21000, kCount = 32768 - kLowest;
  static std::mt19937 draw(std::random_device{}());
  std::vector<int> ports;
  for (int tries = 0; static_cast<int>(ports.size()) < n; ++tries) {
    REQUIRE_MESSAGE(tries < 1000, "no free port in 21000-32767 after 1000 draws");
    const int port = kLowest + static_cast<int>(draw() % kCount);
    if (std::find(ports.begin(), ports.end(), port) != ports.end()) continue;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(port));
    const bool free = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
    ::close(fd);
    if (free) ports.push_back(port);
  }
  return ports;
}

inline std::vector<Endpoint> loopback_endpoints(const std::vector<int>& ports) {
  std::vector<Endpoint> endpoints;
  for (int port : ports) endpoints.push_back(Endpoint{"127.0.0.1", port});
  return endpoints;
}

// Gives every rank every other's session id, as the agents' control plane
// and the rendezvous do: it names each rank's shared-memory inbox, and with
// a key keys the links.
inline void introduce(std::initializer_list<Transport*> ranks) {
  for (Transport* t : ranks)
    for (Transport* peer : ranks)
      if (t != peer && peer->session() != nullptr) t->set_peer_session(peer->rank(), *peer->session());
}

inline void introduce(const std::vector<std::unique_ptr<Transport>>& ranks) {
  for (const auto& t : ranks)
    for (const auto& peer : ranks)
      if (t != peer && peer->session() != nullptr) t->set_peer_session(peer->rank(), *peer->session());
}

// One ZeroMQ transport per rank, introduced to each other; retried on fresh
// ports if another process took one of them in between.
inline std::vector<std::unique_ptr<Transport>> make_zmq_world(int world, ZmqOptions options = {}) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto endpoints = loopback_endpoints(free_ports(world));
    std::vector<std::unique_ptr<Transport>> out;
    bool retry = false;
    for (int rank = 0; rank < world; ++rank) {
      auto transport = make_zmq_transport(rank, endpoints, options);
      if (!transport.ok()) {
        INFO(transport.status().to_string());
        REQUIRE(transport.status().message().find("already in use") != std::string::npos);
        retry = true;
        break;
      }
      out.push_back(std::move(transport).value());
    }
    if (retry) continue;
    introduce(out);
    return out;
  }
  FAIL("no free ports after 5 attempts");
  return {};
}

inline std::vector<std::unique_ptr<Transport>> make_world(Kind kind, int world) {
  if (kind == Kind::kInproc) return make_inproc_transports(world);
  return make_zmq_world(world, kind == Kind::kZmq ? tcp_only() : ZmqOptions{});
}

// Runs fn(rank) on one thread per rank and returns each rank's Status.
inline std::vector<Status> run_ranks(int world, const std::function<Status(int rank)>& fn) {
  std::vector<Status> statuses(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] { statuses[rank] = fn(rank); });
  }
  for (auto& thread : threads) thread.join();
  return statuses;
}

inline void check_all_ok(const std::vector<Status>& statuses) {
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    INFO("rank " << rank << ": " << statuses[rank].to_string());
    CHECK(statuses[rank].ok());
  }
}

inline std::span<const std::byte> as_span(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}
inline std::string as_string(std::span<const std::byte> bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

inline Clock::time_point in_ms(int ms) { return Clock::now() + std::chrono::milliseconds(ms); }

}  // namespace rill::comm::testing
