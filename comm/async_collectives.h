// AsyncCollectives: the collectives of collectives.h started without
// waiting. Each call queues the operation and returns a Work handle at once;
// a thread of this object runs the queued operations one at a time, in the
// order they were called, on its own Collectives. The caller overlaps its
// own work, then waits on the handle or tests it (torch.distributed's
// async_op=True). Every rank must queue the same operations in the same
// order (as for blocking calls), and the buffers of an operation must stay
// alive, and `out` untouched, until its Work is done.
//
// After an error every later operation of the object is refused, as with
// Collectives (the ranks no longer agree on what was sent). The destructor
// waits for the queued operations (each ends by its deadline).
//
// Threads: calls and Work's methods from any thread.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <thread>

#include "base/mutex.h"
#include "comm/collectives.h"

namespace rill::comm {

class Work {
 public:
  // Whether the operation has ended (ok or not).
  bool test() const;
  // Blocks until it has ended; its status.
  Status wait() const;

 private:
  friend class AsyncCollectives;
  void complete(Status status);

  mutable Mutex mu_;
  mutable CondVar cv_;
  bool done_ GUARDED_BY(mu_) = false;
  Status status_ GUARDED_BY(mu_);
};

class AsyncCollectives {
 public:
  explicit AsyncCollectives(Transport& transport, CollectiveOptions options = {});
  ~AsyncCollectives();
  AsyncCollectives(const AsyncCollectives&) = delete;
  AsyncCollectives& operator=(const AsyncCollectives&) = delete;

  int rank() const { return transport_.rank(); }
  int world() const { return transport_.world(); }

  // As Collectives' methods of the same names.
  std::shared_ptr<Work> all_reduce(std::span<const float> in, std::span<float> out, uint64_t tag,
                                   ReduceOp op = ReduceOp::kSum);
  std::shared_ptr<Work> reduce_scatter(std::span<const float> in, std::span<float> out, uint64_t tag,
                                       ReduceOp op = ReduceOp::kSum);
  std::shared_ptr<Work> reduce(std::span<const float> in, std::span<float> out, int root, uint64_t tag,
                               ReduceOp op = ReduceOp::kSum);
  std::shared_ptr<Work> all_gather(std::span<const std::byte> in, std::span<std::byte> out, uint64_t tag);
  std::shared_ptr<Work> broadcast(std::span<std::byte> buffer, int root, uint64_t tag);
  std::shared_ptr<Work> gather(std::span<const std::byte> in, std::span<std::byte> out, int root, uint64_t tag);
  std::shared_ptr<Work> scatter(std::span<const std::byte> in, std::span<std::byte> out, int root, uint64_t tag);
  std::shared_ptr<Work> all_to_all(std::span<const std::byte> in, std::span<std::byte> out, uint64_t tag);
  std::shared_ptr<Work> barrier(uint64_t tag);
  std::shared_ptr<Work> send(int to, std::span<const std::byte> data, uint64_t tag);
  std::shared_ptr<Work> recv(int from, std::span<std::byte> data, uint64_t tag);

 private:
  using Op = std::function<Status(Collectives&)>;
  std::shared_ptr<Work> enqueue(Op op);
  void run();

  Transport& transport_;
  Collectives collectives_;  // the thread's only
  Mutex mu_;
  CondVar cv_;
  std::deque<std::pair<Op, std::shared_ptr<Work>>> queue_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace rill::comm
