// The data-movement collectives (broadcast, all_gather, gather, scatter,
// all_to_all, barrier, send, recv); the reductions are in collectives.cc.
#include <algorithm>
#include <cstring>

#include "comm/collectives.h"

namespace rill::comm {

// ---- broadcast: a pipelined chain from root -----------------------------------

Status Collectives::broadcast(std::span<std::byte> buffer, int root, uint64_t tag) {
  if (root < 0 || root >= world()) {
    return invalid_argument("broadcast {}: root {} is not a rank", describe_tag(tag), root);
  }
  RILL_RETURN_IF_ERROR(begin("broadcast", tag));
  return end("broadcast", "pipelined chain", tag, broadcast_chain(buffer, root, tag));
}

// A broadcast larger than options_.direct_bytes ends with an empty message
// from the chain's last rank to root: root returns only once every rank has
// its copy, so a root that broadcasts again and again cannot run ahead and
// pile its data up in the others' mailboxes (where it would be copied out of
// the transport instead of received into `buffer`). Small broadcasts stay
// one-way, as eager sends.
Status Collectives::broadcast_chain(std::span<std::byte> buffer, int root, uint64_t tag) {
  const int n = world();
  if (n == 1) return Status::ok_status();
  const int position = ((rank() - root) % n + n) % n;
  const size_t chunk = std::max<size_t>(1, options_.chunk_bytes);
  const bool acknowledged = buffer.size() > options_.direct_bytes;
  if (position == 0) {
    RILL_RETURN_IF_ERROR(send_chunks(peer(1), buffer, chunk, tag));
    if (!acknowledged) return Status::ok_status();
    RILL_RETURN_IF_ERROR(recv_chunk(peer(-1), 0, tag).status());
    received_.reset();
    return Status::ok_status();
  }
  for (size_t at = 0; at < buffer.size(); at += chunk) {
    const size_t len = std::min(chunk, buffer.size() - at);
    RILL_ASSIGN_OR_RETURN(const std::byte* data, recv_chunk(peer(-1), len, tag));
    std::memcpy(buffer.data() + at, data, len);
    received_.reset();
    if (position < n - 1) RILL_RETURN_IF_ERROR(send_chunk(peer(1), buffer.subspan(at, len), tag));
  }
  if (acknowledged && position == n - 1) RILL_RETURN_IF_ERROR(send_chunk(peer(1), {}, tag));
  return Status::ok_status();
}

// ---- data movement ---------------------------------------------------------

Status Collectives::all_gather(std::span<const std::byte> in, std::span<std::byte> out, uint64_t tag) {
  if (out.size() != in.size() * static_cast<size_t>(world())) {
    return invalid_argument("all_gather {}: output has {} bytes, expected {} x {}", describe_tag(tag), out.size(),
                            world(), in.size());
  }
  RILL_RETURN_IF_ERROR(begin("all_gather", tag));
  set_blocks(out.size());
  return end("all_gather", "ring", tag, all_gather_ring(in, out, tag));
}

Status Collectives::all_gather_v(std::span<const std::byte> in, std::span<std::byte> out,
                                 std::span<const size_t> counts, uint64_t tag) {
  RILL_RETURN_IF_ERROR(set_blocks(counts, out.size(), "all_gather_v", tag));
  if (in.size() != blocks_[static_cast<size_t>(rank())].size) {
    return invalid_argument("all_gather_v {}: input has {} bytes, rank {}'s block {}", describe_tag(tag), in.size(),
                            rank(), blocks_[static_cast<size_t>(rank())].size);
  }
  RILL_RETURN_IF_ERROR(begin("all_gather_v", tag));
  return end("all_gather_v", "ring", tag, all_gather_ring(in, out, tag));
}

// Over blocks_ (bytes). Step s sends block r-s to the right and receives
// block r-s-1 from the left.
Status Collectives::all_gather_ring(std::span<const std::byte> in, std::span<std::byte> out, uint64_t tag) {
  const int n = world();
  const size_t chunk = std::max<size_t>(1, options_.chunk_bytes);
  std::byte* own = out.data() + blocks_[static_cast<size_t>(rank())].begin;
  if (own != in.data() && !in.empty()) std::memmove(own, in.data(), in.size());
  if (n == 1) return Status::ok_status();
  RILL_RETURN_IF_ERROR(send_chunks(peer(1), in, chunk, tag));
  for (int s = 0; s < n - 1; ++s) {
    const BlockRange block = blocks_[static_cast<size_t>(peer(-s - 1))];
    std::byte* target = out.data() + block.begin;
    for (size_t at = 0; at < block.size; at += chunk) {
      const size_t len = std::min(chunk, block.size - at);
      RILL_ASSIGN_OR_RETURN(const std::byte* data, recv_chunk(peer(-1), len, tag));
      std::memcpy(target + at, data, len);
      received_.reset();
      if (s + 1 < n - 1) RILL_RETURN_IF_ERROR(send_chunk(peer(1), {target + at, len}, tag));
    }
  }
  return Status::ok_status();
}

Status Collectives::gather(std::span<const std::byte> in, std::span<std::byte> out, int root, uint64_t tag) {
  const int n = world();
  if (root < 0 || root >= n) return invalid_argument("gather {}: root {} is not a rank", describe_tag(tag), root);
  const size_t block = in.size();
  if (rank() == root && out.size() != block * static_cast<size_t>(n)) {
    return invalid_argument("gather {}: output has {} bytes, expected {} x {}", describe_tag(tag), out.size(), n,
                            block);
  }
  RILL_RETURN_IF_ERROR(begin("gather", tag));
  const size_t chunk = std::max<size_t>(1, options_.chunk_bytes);
  auto run = [&]() -> Status {
    if (rank() != root) return send_chunks(root, in, chunk, tag);
    if (block > 0) std::memmove(out.data() + static_cast<size_t>(root) * block, in.data(), block);
    for (int k = 1; k < n; ++k) {
      const int from = (root + k) % n;
      for (size_t at = 0; at < block; at += chunk) {
        const size_t len = std::min(chunk, block - at);
        RILL_ASSIGN_OR_RETURN(const std::byte* data, recv_chunk(from, len, tag));
        std::memcpy(out.data() + static_cast<size_t>(from) * block + at, data, len);
      }
    }
    return Status::ok_status();
  };
  return end("gather", "direct", tag, run());
}

Status Collectives::scatter(std::span<const std::byte> in, std::span<std::byte> out, int root, uint64_t tag) {
  const int n = world();
  if (root < 0 || root >= n) return invalid_argument("scatter {}: root {} is not a rank", describe_tag(tag), root);
  const size_t block = out.size();
  if (rank() == root && in.size() != block * static_cast<size_t>(n)) {
    return invalid_argument("scatter {}: input has {} bytes, expected {} x {}", describe_tag(tag), in.size(), n,
                            block);
  }
  RILL_RETURN_IF_ERROR(begin("scatter", tag));
  const size_t chunk = std::max<size_t>(1, options_.chunk_bytes);
  auto run = [&]() -> Status {
    if (rank() == root) {
      for (int k = 1; k < n; ++k) {
        const int to = (root + k) % n;
        RILL_RETURN_IF_ERROR(send_chunks(to, in.subspan(static_cast<size_t>(to) * block, block), chunk, tag));
      }
      if (block > 0) std::memmove(out.data(), in.data() + static_cast<size_t>(root) * block, block);
      return Status::ok_status();
    }
    for (size_t at = 0; at < block; at += chunk) {
      const size_t len = std::min(chunk, block - at);
      RILL_ASSIGN_OR_RETURN(const std::byte* data, recv_chunk(root, len, tag));
      std::memcpy(out.data() + at, data, len);
    }
    return Status::ok_status();
  };
  return end("scatter", "direct", tag, run());
}

Status Collectives::all_to_all(std::span<const std::byte> in, std::span<std::byte> out, uint64_t tag) {
  const int n = world();
  if (in.size() != out.size() || in.size() % static_cast<size_t>(n) != 0) {
    return invalid_argument("all_to_all {}: input has {} bytes and output {}; both must be the same multiple of {}",
                            describe_tag(tag), in.size(), out.size(), n);
  }
  RILL_RETURN_IF_ERROR(begin("all_to_all", tag));
  set_blocks(in.size());
  recv_blocks_ = blocks_;
  return end("all_to_all", "pairwise", tag, all_to_all_blocks(in, out, tag));
}

Status Collectives::all_to_all_v(std::span<const std::byte> in, std::span<const size_t> send_counts,
                                 std::span<std::byte> out, std::span<const size_t> recv_counts, uint64_t tag) {
  RILL_RETURN_IF_ERROR(set_blocks(recv_counts, out.size(), "all_to_all_v (receive)", tag));
  recv_blocks_ = blocks_;
  RILL_RETURN_IF_ERROR(set_blocks(send_counts, in.size(), "all_to_all_v (send)", tag));
  const size_t own = static_cast<size_t>(rank());
  if (blocks_[own].size != recv_blocks_[own].size) {
    return invalid_argument("all_to_all_v {}: rank {} sends itself {} bytes but expects {}", describe_tag(tag), rank(),
                            blocks_[own].size, recv_blocks_[own].size);
  }
  RILL_RETURN_IF_ERROR(begin("all_to_all_v", tag));
  return end("all_to_all_v", "pairwise", tag, all_to_all_blocks(in, out, tag));
}

// Sends blocks_[j] of in to rank j and receives recv_blocks_[j] of out from it.
Status Collectives::all_to_all_blocks(std::span<const std::byte> in, std::span<std::byte> out, uint64_t tag) {
  const int n = world();
  const size_t chunk = std::max<size_t>(1, options_.chunk_bytes);
  for (int k = 1; k < n; ++k) {
    const BlockRange block = blocks_[static_cast<size_t>(peer(k))];
    RILL_RETURN_IF_ERROR(send_chunks(peer(k), in.subspan(block.begin, block.size), chunk, tag));
  }
  const BlockRange mine = blocks_[static_cast<size_t>(rank())];
  if (mine.size > 0) std::memcpy(out.data() + recv_blocks_[static_cast<size_t>(rank())].begin, in.data() + mine.begin, mine.size);
  for (int k = 1; k < n; ++k) {
    const int from = peer(-k);
    const BlockRange block = recv_blocks_[static_cast<size_t>(from)];
    for (size_t at = 0; at < block.size; at += chunk) {
      const size_t len = std::min(chunk, block.size - at);
      RILL_ASSIGN_OR_RETURN(const std::byte* data, recv_chunk(from, len, tag));
      std::memcpy(out.data() + block.begin + at, data, len);
      received_.reset();
    }
  }
  return Status::ok_status();
}

Status Collectives::barrier(uint64_t tag) {
  RILL_RETURN_IF_ERROR(begin("barrier", tag));
  auto run = [&]() -> Status {
    // Round k talks to rank +-2^k; each ordered pair carries one round only.
    for (int distance = 1; distance < world(); distance *= 2) {
      RILL_RETURN_IF_ERROR(send_chunk(peer(distance), {}, tag));
      RILL_RETURN_IF_ERROR(recv_chunk(peer(-distance), 0, tag).status());
    }
    return Status::ok_status();
  };
  return end("barrier", "dissemination", tag, run());
}

Status Collectives::send(int to, std::span<const std::byte> data, uint64_t tag) {
  if (to < 0 || to >= world() || to == rank()) {
    return invalid_argument("send {}: rank {} is not a peer of rank {}", describe_tag(tag), to, rank());
  }
  RILL_RETURN_IF_ERROR(begin("send", tag));
  return end("send", "point-to-point", tag, send_chunk(to, data, tag));
}

Status Collectives::recv(int from, std::span<std::byte> data, uint64_t tag) {
  if (from < 0 || from >= world() || from == rank()) {
    return invalid_argument("recv {}: rank {} is not a peer of rank {}", describe_tag(tag), from, rank());
  }
  RILL_RETURN_IF_ERROR(begin("recv", tag));
  auto run = [&]() -> Status {
    RILL_ASSIGN_OR_RETURN(const std::byte* bytes, recv_chunk(from, data.size(), tag));
    if (!data.empty()) std::memcpy(data.data(), bytes, data.size());
    return Status::ok_status();
  };
  return end("recv", "point-to-point", tag, run());
}

}  // namespace rill::comm
