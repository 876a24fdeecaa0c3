#include "runtime/node/local_collective.h"

#include <cstring>
#include <numeric>
#include <type_traits>
#include <utility>

#include <fmt/ranges.h>

namespace rill {

class LocalCollective::Rank final : public DeviceCommunicator {
 public:
  Rank(LocalCollective& group, int local) : group_(group), local_(local) {}
  int rank() const override { return group_.first_rank_ + local_; }
  int world() const override { return group_.world_; }
  const char* backend() const override { return "host"; }
  bool meets_on_host() const override { return true; }
  StatusOr<void*> scratch(size_t bytes) override {
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    return static_cast<void*>(scratch_.data());
  }
  Status copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                   size_t rows) override {
    for (size_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<std::byte*>(dst) + r * dst_pitch, static_cast<const std::byte*>(src) + r * src_pitch,
                  width);
    return {};
  }
  Status all_reduce(std::span<const void* const> inputs, std::span<void* const> outputs,
                    std::span<const size_t> elements, DType dtype, comm::ReduceOp op, uint64_t tag) override {
    if (inputs.size() != outputs.size() || inputs.size() != elements.size() || inputs.empty())
      return internal_error("all_reduce of {} inputs, {} outputs, {} sizes", inputs.size(), outputs.size(),
                            elements.size());
    return group_.meet(local_, Arrival{CollectiveCall::kAllReduce, inputs, outputs, elements, {}, dtype, op, tag});
  }
  Status reduce_scatter(const void* input, void* output, std::span<const size_t> counts, DType dtype,
                        comm::ReduceOp op, uint64_t tag) override {
    return one(CollectiveCall::kReduceScatter, input, output, counts, dtype, op, tag);
  }
  Status all_gather(const void* input, void* output, std::span<const size_t> counts, DType dtype,
                    uint64_t tag) override {
    return one(CollectiveCall::kAllGather, input, output, counts, dtype, comm::ReduceOp::kSum, tag);
  }
  Status all_to_all(const void* input, std::span<const size_t> send_counts, void* output,
                    std::span<const size_t> recv_counts, DType dtype, uint64_t tag) override {
    if (recv_counts.size() != static_cast<size_t>(group_.world_))
      return internal_error("all_to_all tag {}: {} blocks received for {} ranks", tag, recv_counts.size(),
                            group_.world_);
    received_ = recv_counts;
    return one(CollectiveCall::kAllToAll, input, output, send_counts, dtype, comm::ReduceOp::kSum, tag);
  }

 private:
  // A call of one buffer each way (spans over this rank's own one-element
  // arrays, alive while it meets the others) and every rank's block.
  Status one(CollectiveCall call, const void* input, void* output, std::span<const size_t> counts, DType dtype,
             comm::ReduceOp op, uint64_t tag) {
    if (counts.size() != static_cast<size_t>(group_.world_))
      return internal_error("{} tag {}: {} blocks for {} ranks", collective_call_name(call), tag, counts.size(),
                            group_.world_);
    in_[0] = input;
    out_[0] = output;
    const std::span<const size_t> received = call == CollectiveCall::kAllToAll ? received_ : std::span<const size_t>();
    return group_.meet(local_, Arrival{call, in_, out_, counts, received, dtype, op, tag});
  }

  LocalCollective& group_;
  const int local_;
  const void* in_[1] = {nullptr};
  void* out_[1] = {nullptr};
  std::span<const size_t> received_;  // an all-to-all's, during its call
  std::vector<std::byte> scratch_;    // grown, kept
};

LocalCollective::LocalCollective(std::vector<int> devices, int first_rank, int world, comm::Collectives* across,
                                 std::chrono::milliseconds timeout, comm::Liveness liveness)
    : devices_(std::move(devices)),
      first_rank_(first_rank),
      world_(world),
      across_(across),
      timeout_(timeout),
      liveness_(std::move(liveness)) {
  for (size_t i = 0; i < devices_.size(); ++i) ranks_.push_back(std::make_unique<Rank>(*this, static_cast<int>(i)));
  MutexLock lock(mu_);
  arrivals_.resize(devices_.size());
  present_.assign(devices_.size(), false);
}

LocalCollective::~LocalCollective() = default;

DeviceCommunicator* LocalCollective::rank(int local) { return ranks_[static_cast<size_t>(local)].get(); }

int LocalCollective::arrived() {
  MutexLock lock(mu_);
  return arrived_;
}

void LocalCollective::cancel(const std::string& reason) {
  MutexLock lock(mu_);
  if (cancelled_.ok()) cancelled_ = Status(Code::kAborted, reason);
  cv_.notify_all();
}

Status LocalCollective::meet(int local, const Arrival& arrival) {
  auto deadline = comm::Clock::now() + timeout_;
  comm::LivenessWatch liveness(liveness_);
  UniqueLock lock(mu_);
  if (!cancelled_.ok()) return cancelled_;
  if (present_[static_cast<size_t>(local)])
    return internal_error("device {} called a collective (tag {}) twice before the others came",
                          devices_[static_cast<size_t>(local)], arrival.tag);
  const uint64_t generation = generation_;
  arrivals_[static_cast<size_t>(local)] = arrival;
  present_[static_cast<size_t>(local)] = true;
  if (++arrived_ < static_cast<int>(devices_.size())) {
    // Until the last one in has done the call. Once all are in (working_),
    // its own collective's deadline and cancel bound the wait, and the
    // buffers stay its until it is done; before, a cancel or this rank's
    // deadline takes it out again, and fails every later call alike.
    while (generation_ == generation) {
      if (working_) {
        cv_.wait(mu_);
        continue;
      }
      if (cancelled_.ok() && !cv_.wait_until(mu_, deadline) && generation_ == generation && !working_ &&
          cancelled_.ok()) {
        // A device held by work that goes on (its checkpoint disk) is waited for.
        if (liveness.moved()) {
          deadline = comm::Clock::now() + timeout_;
          continue;
        }
        std::vector<int> missing;
        for (size_t i = 0; i < devices_.size(); ++i)
          if (!present_[i]) missing.push_back(devices_[i]);
        cancelled_ = Status(Code::kDeadlineExceeded,
                            fmt::format("device {} waited {} ms in collective tag {} for device(s) {} of its node",
                                        devices_[static_cast<size_t>(local)], timeout_.count(), arrival.tag,
                                        fmt::join(missing, ", ")));
        cv_.notify_all();
      }
      if (!cancelled_.ok() && generation_ == generation && !working_) {
        present_[static_cast<size_t>(local)] = false;
        --arrived_;
        return cancelled_;
      }
    }
    return result_;
  }
  // The last one in: every rank must be making the same call.
  Status status;
  for (const Arrival& a : arrivals_) {
    const Arrival& first = arrivals_[0];
    bool same = a.call == first.call && a.tag == first.tag && a.dtype == first.dtype && a.op == first.op &&
                a.elements.size() == first.elements.size();
    // An all-to-all's blocks differ by rank (all_to_all() checks they pair up).
    for (size_t k = 0; same && first.call != CollectiveCall::kAllToAll && k < a.elements.size(); ++k)
      same = a.elements[k] == first.elements[k];
    same = same && a.received.size() == first.received.size();
    if (!same) {
      status = internal_error("this node's ranks {} and up of a communicator disagree on the collective: {} tag {} "
                              "vs {} tag {}",
                              first_rank_, collective_call_name(first.call), first.tag, collective_call_name(a.call),
                              a.tag);
      break;
    }
  }
  working_ = true;
  sums_ = arrivals_;
  lock.unlock();
  if (status.ok()) status = combine();
  lock.lock();
  working_ = false;
  result_ = status;
  arrived_ = 0;
  present_.assign(devices_.size(), false);
  ++generation_;
  cv_.notify_all();
  return status;
}

Status LocalCollective::combine() {
  switch (sums_[0].call) {
    case CollectiveCall::kAllReduce: return all_reduce();
    case CollectiveCall::kReduceScatter: return reduce_scatter();
    case CollectiveCall::kAllGather: return all_gather();
    case CollectiveCall::kAllToAll: return all_to_all();
    case CollectiveCall::kReduce:
    case CollectiveCall::kOther: break;
  }
  return internal_error("a device collective's {}, which the host's side does not do",
                        collective_call_name(sums_[0].call));
}

// The node's inputs combined in rank order, the first two in one pass, then
// one pass per further rank (a host boxing's order), into `dst`; one rank's
// copied (unless it is `dst`).
template <typename T>
void LocalCollective::sum_ranks(size_t k, T* dst, size_t n) const {
  auto in = [&](size_t r) { return static_cast<const T*>(sums_[r].inputs[k]); };
  if (sums_.size() == 1) {
    if (dst != in(0)) std::memmove(dst, in(0), n * sizeof(T));
    return;
  }
  comm::combine_into(sums_[0].op, dst, in(0), reinterpret_cast<const std::byte*>(in(1)), n);
  for (size_t r = 2; r < sums_.size(); ++r)
    comm::combine_into(sums_[0].op, dst, dst, reinterpret_cast<const std::byte*>(in(r)), n);
}

Status LocalCollective::all_reduce() {
  const Arrival& first = sums_[0];
  const size_t tensors = first.elements.size();
  return visit_dtype(first.dtype, [&]<typename T>(std::type_identity<T>) -> Status {
    // Where the sum lands: one tensor in rank 0's output; a bucket's
    // tensors packed one after another (a host boxing's bucket layout).
    size_t total = 0;
    for (size_t n : first.elements) total += n;
    T* packed = nullptr;
    if (tensors > 1) {
      packed_.resize(total * sizeof(T));
      packed = reinterpret_cast<T*>(packed_.data());
    }
    size_t offset = 0;
    for (size_t k = 0; k < tensors; ++k) {
      const size_t n = first.elements[k];
      sum_ranks<T>(k, tensors > 1 ? packed + offset : static_cast<T*>(first.outputs[k]), n);
      offset += n;
    }
    T* sum = tensors > 1 ? packed : static_cast<T*>(first.outputs[0]);
    if (across_ != nullptr) {
      std::span<T> all(sum, total);
      RILL_RETURN_IF_ERROR(across_->all_reduce(std::span<const T>(all), all, first.tag, first.op));
    }
    // Every output gets the sum (rank 0's holds it already, one tensor).
    offset = 0;
    for (size_t k = 0; k < tensors; ++k) {
      const size_t n = first.elements[k];
      for (size_t r = 0; r < sums_.size(); ++r) {
        T* out = static_cast<T*>(sums_[r].outputs[k]);
        if (out != sum + offset) std::memcpy(out, sum + offset, n * sizeof(T));
      }
      offset += n;
    }
    return Status();
  });
}

Status LocalCollective::reduce_scatter() {
  const Arrival& first = sums_[0];
  const std::span<const size_t> counts = first.elements;  // every rank's block
  const size_t local = sums_.size();
  return visit_dtype(first.dtype, [&]<typename T>(std::type_identity<T>) -> Status {
    // The node's sum of every block (a host boxing's packed local sum)...
    const size_t all = std::accumulate(counts.begin(), counts.end(), size_t{0});
    packed_.resize(all * sizeof(T));
    T* sum = reinterpret_cast<T*>(packed_.data());
    sum_ranks<T>(0, sum, all);
    // ... then, across nodes, this node's blocks of the total (its ranks'
    // blocks are contiguous: ranks are node-major, as many on each node).
    const size_t begin = std::accumulate(counts.begin(), counts.begin() + first_rank_, size_t{0});
    const T* mine = sum + begin;
    if (across_ != nullptr) {
      counts_.assign(static_cast<size_t>(across_->world()), 0);
      for (size_t r = 0; r < counts.size(); ++r) counts_[r / local] += counts[r];
      const size_t node_elements = counts_[static_cast<size_t>(first_rank_) / local];
      node_.resize(node_elements * sizeof(T));
      T* node = reinterpret_cast<T*>(node_.data());
      RILL_RETURN_IF_ERROR(across_->reduce_scatter_v(std::span<const T>(sum, all), std::span<T>(node, node_elements),
                                                     counts_, first.tag, first.op));
      mine = node;
    }
    for (size_t r = 0, at = 0; r < local; ++r) {
      const size_t n = counts[static_cast<size_t>(first_rank_) + r];
      std::memcpy(sums_[r].outputs[0], mine + at, n * sizeof(T));
      at += n;
    }
    return Status();
  });
}

Status LocalCollective::all_gather() {
  const Arrival& first = sums_[0];
  const std::span<const size_t> counts = first.elements;  // every rank's block
  const size_t element = dtype_size(first.dtype), local = sums_.size();
  const size_t all = std::accumulate(counts.begin(), counts.end(), size_t{0}) * element;
  // The node's blocks in rank order, then every node's.
  size_t node_bytes = 0;
  for (size_t r = 0; r < local; ++r) node_bytes += counts[static_cast<size_t>(first_rank_) + r] * element;
  node_.resize(node_bytes);
  for (size_t r = 0, at = 0; r < local; ++r) {
    const size_t bytes = counts[static_cast<size_t>(first_rank_) + r] * element;
    std::memcpy(node_.data() + at, sums_[r].inputs[0], bytes);
    at += bytes;
  }
  const std::byte* whole = node_.data();
  if (across_ != nullptr) {
    counts_.assign(static_cast<size_t>(across_->world()), 0);
    for (size_t r = 0; r < counts.size(); ++r) counts_[r / local] += counts[r] * element;
    packed_.resize(all);
    RILL_RETURN_IF_ERROR(across_->all_gather_v(node_, packed_, counts_, first.tag));
    whole = packed_.data();
  }
  for (size_t r = 0; r < local; ++r) std::memcpy(sums_[r].outputs[0], whole, all);
  return Status();
}

// Rank r's block q goes to rank q. Within the node, straight from r's input
// to q's output; across nodes, one message a node: for node m, the blocks
// of this node's ranks (in order) for m's ranks (in order), and from m the
// blocks of m's ranks for this node's, which each rank's received counts
// size. Copies only: the bits of a host boxing's.
Status LocalCollective::all_to_all() {
  const Arrival& first = sums_[0];
  const size_t element = dtype_size(first.dtype), local = sums_.size();
  const size_t world = static_cast<size_t>(world_), me = static_cast<size_t>(first_rank_);
  // Where rank q's block r starts in its output, and rank r's block q in its input (bytes).
  auto received_at = [&](size_t q, size_t r) {
    return std::accumulate(sums_[q].received.begin(), sums_[q].received.begin() + static_cast<long>(r), size_t{0}) *
           element;
  };
  auto sent_at = [&](size_t r, size_t q) {
    return std::accumulate(sums_[r].elements.begin(), sums_[r].elements.begin() + static_cast<long>(q), size_t{0}) *
           element;
  };
  for (size_t r = 0; r < local; ++r)
    for (size_t q = 0; q < local; ++q)
      if (sums_[r].elements[me + q] != sums_[q].received[me + r])
        return internal_error("all_to_all tag {}: rank {} sends rank {} {} elements, which expects {}", first.tag,
                              me + r, me + q, sums_[r].elements[me + q], sums_[q].received[me + r]);
  for (size_t r = 0; r < local; ++r)
    for (size_t q = 0; q < local; ++q) {
      const size_t bytes = sums_[r].elements[me + q] * element;
      std::memcpy(static_cast<std::byte*>(sums_[q].outputs[0]) + received_at(q, me + r),
                  static_cast<const std::byte*>(sums_[r].inputs[0]) + sent_at(r, me + q), bytes);
    }
  if (across_ == nullptr) return Status();
  const size_t nodes = world / local, node = me / local;
  std::vector<size_t>& send = counts_;  // bytes for each node, and from it
  std::vector<size_t>& recv = received_;
  send.assign(nodes, 0);
  recv.assign(nodes, 0);
  for (size_t m = 0; m < nodes; ++m)
    for (size_t i = 0; i < local && m != node; ++i)
      for (size_t j = 0; j < local; ++j) {
        send[m] += sums_[i].elements[m * local + j] * element;
        recv[m] += sums_[j].received[m * local + i] * element;
      }
  const size_t out_bytes = std::accumulate(recv.begin(), recv.end(), size_t{0});
  node_.resize(std::accumulate(send.begin(), send.end(), size_t{0}));
  packed_.resize(out_bytes);
  size_t at = 0;
  for (size_t m = 0; m < nodes; ++m)
    for (size_t i = 0; i < local && m != node; ++i)
      for (size_t j = 0; j < local; ++j) {
        const size_t bytes = sums_[i].elements[m * local + j] * element;
        std::memcpy(node_.data() + at, static_cast<const std::byte*>(sums_[i].inputs[0]) + sent_at(i, m * local + j),
                    bytes);
        at += bytes;
      }
  RILL_RETURN_IF_ERROR(across_->all_to_all_v(node_, send, packed_, recv, first.tag));
  at = 0;
  for (size_t m = 0; m < nodes; ++m)
    for (size_t i = 0; i < local && m != node; ++i)
      for (size_t j = 0; j < local; ++j) {
        const size_t bytes = sums_[j].received[m * local + i] * element;
        std::memcpy(static_cast<std::byte*>(sums_[j].outputs[0]) + received_at(j, m * local + i), packed_.data() + at,
                    bytes);
        at += bytes;
      }
  return Status();
}

}  // namespace rill
