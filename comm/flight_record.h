// FlightRecord: what a node's communication was doing, kept as it goes so
// that a stall or a lost node can be explained. For each caller of
// collectives (a boxing task among a group of nodes) it holds the call in
// flight (its operation and sequence number: the caller's how-manieth call,
// the same on every node of the group) and the node the call waits for a
// message from, or the last call that completed or failed; for each link to
// another node, the actor messages sent and received; and a bounded ring of
// the last events (each call's begin and end, each actor message), oldest
// dropped first.
//
// The callers' own threads write it; any thread reads it (status, errors).
// Bounded: kEvents events and one state per caller and per link.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/mutex.h"

namespace rill::comm {

class FlightRecord {
 public:
  static constexpr size_t kEvents = 256;
  using Clock = std::chrono::steady_clock;

  explicit FlightRecord(int nodes = 0);

  // A caller of collectives, its name and its group (the nodes it calls
  // among, in its ranks' order): its index for the calls below.
  int add_caller(std::string name, std::vector<int> group);
  // Its call begins (`op`: a static string), of `bytes`; returns the call's
  // sequence number.
  int64_t begin(int caller, const char* op, int64_t bytes);
  // It waits for a message from rank `rank` of its group (-1: no longer).
  void wait_for(int caller, int rank);
  void end(int caller, bool ok);
  // An actor message to or from node `node`.
  void message(bool sent, int node, int64_t bytes);

  // What each caller waits for now, or, once a call failed, what it was
  // waiting for then ("grad/w1: all_reduce #57 among nodes [0, 1, 2] waits
  // for node 2 (3.1 s)"), with the node it waits for.
  struct Wait {
    std::string line;
    int node = -1;
    std::string caller, op;
    int64_t seq = -1;
  };
  std::vector<Wait> waits() const;
  // The record as JSON: callers, links, and the last `events` events
  // (oldest first; times in ms before now).
  nlohmann::json json(size_t events = 32) const;

 private:
  enum class Kind : uint8_t { kBegin, kEnd, kFailed, kSent, kReceived };
  struct Event {
    Clock::time_point at;
    Kind kind = Kind::kBegin;
    int who = -1;  // a caller, or (messages) a node
    int64_t seq = 0;
    int64_t bytes = 0;
  };
  struct Caller {
    std::string name;
    std::vector<int> group;
    const char* op = "";
    int64_t calls = 0;           // begun so far: the next call's number
    int64_t bytes = 0;
    bool in_call = false, failed = false;
    int waiting_for = -1;        // a node
    Clock::time_point since{};   // the call's begin, or its wait's
    int64_t last_completed = -1;
    const char* last_op = "";
  };
  struct Link {
    int64_t sent = 0, received = 0, sent_bytes = 0, received_bytes = 0;
    Clock::time_point last_sent{}, last_received{};
  };
  void add_locked(const Event& e) REQUIRES(mu_);

  mutable Mutex mu_;
  std::vector<Caller> callers_ GUARDED_BY(mu_);
  std::vector<Link> links_ GUARDED_BY(mu_);
  std::vector<Event> ring_ GUARDED_BY(mu_);  // kEvents, filled from next_ on
  size_t next_ GUARDED_BY(mu_) = 0;
  size_t count_ GUARDED_BY(mu_) = 0;
};

}  // namespace rill::comm
