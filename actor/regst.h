// Regst ports: an actor's view of the registers it writes (OutputPort) and
// reads (InputPort). Memory belongs to the runtime; a port holds one view per
// slot. Touched only by the owning actor's thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/tensor.h"

namespace rill {

// The producer's side: register_num slots, each lent to every consumer until
// all of them have acked it. Slots are written round-robin, so consumers read
// them in step order.
struct OutputPort {
  int64_t regst = 0;
  std::string name;
  std::vector<uint64_t> consumers;
  // Per consumer: an earlier one is on its node (its ready is a repeat:
  // the bytes reach that node once).
  std::vector<bool> repeats;
  std::vector<TensorView> slots;  // register_num views
  std::vector<int> pending;       // outstanding acks per slot
  int64_t written = 0;            // slots readied so far
  // Acts that write one slot before it is ready (an accumulate op writes
  // one per micro-batch, readies one a step); `filling` of them done.
  int acts_per_slot = 1;
  int filling = 0;

  int next_slot() const { return static_cast<int>(written % static_cast<int64_t>(slots.size())); }
  bool next_free() const { return pending[next_slot()] == 0; }
  bool all_free() const {
    for (int p : pending)
      if (p != 0) return false;
    return true;
  }
};

// The consumer's side: a FIFO of readable slots (at most register_num), plus
// whether the producer has said end of data.
struct InputPort {
  int64_t regst = 0;
  std::string name;
  uint64_t producer = 0;
  std::vector<TensorView> slots;  // views of the producer's slots
  std::vector<int> fifo;          // ring of readable slot indices, capacity register_num
  int head = 0;
  int count = 0;
  bool eord = false;
  // Acts that read one slot before it is acked (a model regst, ready once a
  // step, read by each micro-batch); `used` of them done.
  int acts_per_slot = 1;
  int used = 0;
  // An earlier port of the same actor reads the same regst (an op given one
  // tensor twice, x * x): both see every ready, only the first acks.
  bool repeat = false;

  bool readable() const { return count > 0; }
  int front() const { return fifo[head]; }
  // False if the producer readied more slots than it has (a protocol error).
  bool push(int slot) {
    if (count == static_cast<int>(fifo.size())) return false;
    fifo[(head + count) % fifo.size()] = slot;
    ++count;
    return true;
  }
  void pop() {
    head = (head + 1) % static_cast<int>(fifo.size());
    --count;
  }
};

}  // namespace rill
