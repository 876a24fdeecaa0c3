// SerialExecutor: the agent's control loop hands it plan builds and runs.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/cluster/serial_executor.h"

namespace rill {

TEST_CASE("a serial executor runs tasks in order on its own thread, never making the poster wait") {
  std::vector<int> order;
  std::mutex mu;
  std::atomic<bool> release{false};
  std::thread::id ran_on;
  {
    SerialExecutor executor;
    executor.post([&] {
      ran_on = std::this_thread::get_id();
      while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(1);
    });
    const auto start = std::chrono::steady_clock::now();
    for (int i = 2; i <= 4; ++i)
      executor.post([&, i] {
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(i);
      });
    // The first task is still blocked: posting did not wait for it.
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
    {
      std::lock_guard<std::mutex> lock(mu);
      CHECK(order.empty());
    }
    release = true;
  }  // the destructor runs what is queued, then joins
  CHECK(order == std::vector<int>{1, 2, 3, 4});
  CHECK(ran_on != std::this_thread::get_id());
}

}  // namespace rill
