// GroupTransport: a view of a subset of a Transport's ranks as a transport of
// its own. Rank i of the group is rank members[i] of the underlying one, so
// Collectives over a GroupTransport run among those ranks only (boxing on a
// placement that spans some of the nodes). It does not own the transport:
// close() is a no-op, and handlers and accepted tags stay the underlying
// transport's business (collectives use neither).
//
// Threads: as Transport.
#pragma once

#include <algorithm>
#include <vector>

#include "comm/transport.h"

namespace rill::comm {

class GroupTransport final : public Transport {
 public:
  // `members`: distinct ranks of `inner`, one of them inner.rank().
  GroupTransport(Transport& inner, std::vector<int> members) : inner_(inner), members_(std::move(members)) {
    rank_ = static_cast<int>(std::find(members_.begin(), members_.end(), inner_.rank()) - members_.begin());
  }
  // Whether this rank is a member (a group it is not in cannot be used).
  bool member() const { return rank_ < world(); }

  int rank() const override { return rank_; }
  int world() const override { return static_cast<int>(members_.size()); }
  Status send(int to, uint64_t tag, std::span<const std::byte> header, std::span<const std::byte> body = {},
              SendTracker* tracker = nullptr) override {
    if (to < 0 || to >= world()) return invalid_argument("group send to rank {} of {}", to, world());
    return inner_.send(members_[static_cast<size_t>(to)], tag, header, body, tracker);
  }
  Status recv_message(int from, uint64_t tag, Clock::time_point deadline, Received* out) override {
    if (from < 0 || from >= world()) return invalid_argument("group receive from rank {} of {}", from, world());
    return inner_.recv_message(members_[static_cast<size_t>(from)], tag, deadline, out);
  }
  void set_handler(uint64_t, Handler) override {}
  void accept_tags(uint64_t, uint64_t) override {}
  void cancel_tags(uint64_t lo, uint64_t hi, const std::string& reason) override { inner_.cancel_tags(lo, hi, reason); }
  int64_t received_dropped() const override { return inner_.received_dropped(); }
  bool peer_lost(int rank) const override {
    return rank >= 0 && rank < world() && inner_.peer_lost(members_[static_cast<size_t>(rank)]);
  }
  void revive(int rank) override {
    if (rank >= 0 && rank < world()) inner_.revive(members_[static_cast<size_t>(rank)]);
  }
  bool seals(int peer) const override {
    return peer >= 0 && peer < world() && inner_.seals(members_[static_cast<size_t>(peer)]);
  }
  void close() override {}

 private:
  Transport& inner_;
  std::vector<int> members_;
  int rank_ = 0;
};

}  // namespace rill::comm
