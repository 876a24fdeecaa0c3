#include "comm/async_collectives.h"

namespace rill::comm {

bool Work::test() const {
  MutexLock lock(mu_);
  return done_;
}

Status Work::wait() const {
  MutexLock lock(mu_);
  while (!done_) cv_.wait(mu_);
  return status_;
}

void Work::complete(Status status) {
  {
    MutexLock lock(mu_);
    status_ = std::move(status);
    done_ = true;
  }
  cv_.notify_all();
}

AsyncCollectives::AsyncCollectives(Transport& transport, CollectiveOptions options)
    : transport_(transport), collectives_(transport, options), thread_([this] { run(); }) {}

AsyncCollectives::~AsyncCollectives() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<Work> AsyncCollectives::enqueue(Op op) {
  auto work = std::make_shared<Work>();
  {
    MutexLock lock(mu_);
    queue_.emplace_back(std::move(op), work);
  }
  cv_.notify_all();
  return work;
}

void AsyncCollectives::run() {
  for (;;) {
    std::pair<Op, std::shared_ptr<Work>> next;
    {
      MutexLock lock(mu_);
      while (!stopping_ && queue_.empty()) cv_.wait(mu_);
      if (queue_.empty()) return;  // stopping, and everything queued has run
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    next.second->complete(next.first(collectives_));
  }
}

std::shared_ptr<Work> AsyncCollectives::all_reduce(std::span<const float> in, std::span<float> out, uint64_t tag,
                                                   ReduceOp op) {
  return enqueue([=](Collectives& c) { return c.all_reduce(in, out, tag, op); });
}

std::shared_ptr<Work> AsyncCollectives::reduce_scatter(std::span<const float> in, std::span<float> out, uint64_t tag,
                                                       ReduceOp op) {
  return enqueue([=](Collectives& c) { return c.reduce_scatter(in, out, tag, op); });
}

std::shared_ptr<Work> AsyncCollectives::reduce(std::span<const float> in, std::span<float> out, int root,
                                               uint64_t tag, ReduceOp op) {
  return enqueue([=](Collectives& c) { return c.reduce(in, out, root, tag, op); });
}

std::shared_ptr<Work> AsyncCollectives::all_gather(std::span<const std::byte> in, std::span<std::byte> out,
                                                   uint64_t tag) {
  return enqueue([=](Collectives& c) { return c.all_gather(in, out, tag); });
}

std::shared_ptr<Work> AsyncCollectives::broadcast(std::span<std::byte> buffer, int root, uint64_t tag) {
  return enqueue([=](Collectives& c) { return c.broadcast(buffer, root, tag); });
}

std::shared_ptr<Work> AsyncCollectives::gather(std::span<const std::byte> in, std::span<std::byte> out, int root,
                                               uint64_t tag) {
  return enqueue([=](Collectives& c) { return c.gather(in, out, root, tag); });
}

std::shared_ptr<Work> AsyncCollectives::scatter(std::span<const std::byte> in, std::span<std::byte> out, int root,
                                                uint64_t tag) {
  return enqueue([=](Collectives& c) { return c.scatter(in, out, root, tag); });
}

std::shared_ptr<Work> AsyncCollectives::all_to_all(std::span<const std::byte> in, std::span<std::byte> out,
                                                   uint64_t tag) {
  return enqueue([=](Collectives& c) { return c.all_to_all(in, out, tag); });
}

std::shared_ptr<Work> AsyncCollectives::barrier(uint64_t tag) {
  return enqueue([=](Collectives& c) { return c.barrier(tag); });
}

std::shared_ptr<Work> AsyncCollectives::send(int to, std::span<const std::byte> data, uint64_t tag) {
  return enqueue([=](Collectives& c) { return c.send(to, data, tag); });
}

std::shared_ptr<Work> AsyncCollectives::recv(int from, std::span<std::byte> data, uint64_t tag) {
  return enqueue([=](Collectives& c) { return c.recv(from, data, tag); });
}

}  // namespace rill::comm
