// GroupTransport: a view of a subset of a Transport's ranks as a transport of
// its own. Rank i of the group is rank members[i] of the underlying one, so
// Collectives over a GroupTransport run among those ranks only (boxing on a
// placement that spans some of the nodes), and a run whose plan spans fewer
// nodes than the machine list (the survivors of a lost node) numbers its
// nodes 0..n-1 over it: handlers see the sender's group rank, and a message
// from a rank outside the group is dropped. It does not own the transport:
// close() is a no-op.
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
    for (size_t i = 0; i < members_.size(); ++i) {
      if (members_[i] >= static_cast<int>(group_of_.size())) group_of_.resize(static_cast<size_t>(members_[i]) + 1, -1);
      group_of_[static_cast<size_t>(members_[i])] = static_cast<int>(i);
    }
  }
  // The group rank of the underlying rank `inner_rank` (-1: not a member).
  int group_rank(int inner_rank) const {
    return inner_rank >= 0 && inner_rank < static_cast<int>(group_of_.size()) ? group_of_[static_cast<size_t>(inner_rank)]
                                                                             : -1;
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
  void set_handler(uint64_t tag, Handler handler) override {
    if (!handler) return inner_.set_handler(tag, nullptr);
    inner_.set_handler(tag, [this, handler = std::move(handler)](int from, const MessageView& message) {
      if (const int rank = group_rank(from); rank >= 0) handler(rank, message);
    });
  }
  void accept_tags(uint64_t lo, uint64_t hi) override { inner_.accept_tags(lo, hi); }
  void cancel_tags(uint64_t lo, uint64_t hi, const std::string& reason) override { inner_.cancel_tags(lo, hi, reason); }
  void limit_message_bytes(size_t bytes) override { inner_.limit_message_bytes(bytes); }
  void limit_unread_bytes(size_t bytes) override { inner_.limit_unread_bytes(bytes); }
  size_t max_message_bytes() const override { return inner_.max_message_bytes(); }
  int64_t received_dropped() const override { return inner_.received_dropped(); }
  int64_t handler_bytes_copied() const override { return inner_.handler_bytes_copied(); }
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
  std::vector<int> group_of_;  // by underlying rank: its group rank, or -1
  int rank_ = 0;
};

}  // namespace rill::comm
