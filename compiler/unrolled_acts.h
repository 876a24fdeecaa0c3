// Unrolled acts: one node's acts over a few steps as a graph of the orders
// the actor protocol makes one act wait for (compiler/regst_lifetimes.h
// states them), and the productions of the regsts whose slots may share
// bytes, each as the act that first writes it and each reader's last act
// reading it. The lifetime analysis asks this graph which productions are
// acked before others begin; tests ask it again by plain search.
//
// An event is one act of one task: the task's acts are numbered one after
// another (task by task, in the plan's order). Pure; any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "compiler/plan_generated.h"

namespace rill::compiler {

struct UnrolledActs {
  using Event = uint32_t;
  uint32_t events = 0;
  // Successors of event e: succ[first[e] .. first[e + 1]).
  std::vector<uint32_t> first;
  std::vector<Event> succ;
  // A topological order: by step, then by task, as far as the orders allow
  // (so what one step makes comes together). Empty when the graph has a
  // cycle (a plan that could not run); then nothing is shared either.
  std::vector<Event> order;

  struct Production {
    Event start = 0;          // the producer's act that first writes it
    std::vector<Event> ends;  // each reader's last act reading it
  };
  // A regst whose slots may share bytes with others of its thread.
  struct Shared {
    const plan::RegstDesc* regst = nullptr;
    uint64_t thread = 0;  // its producer's ActorId thread key
    // Productions 0 .. n of two periods of its slots' round (production n
    // in slot n % register_num), in order.
    std::vector<Production> productions;
  };
  std::vector<Shared> shared;  // by thread (ascending), then in the plan's task order
};

// Node `node`'s acts in a verified plan (whole or node plan).
UnrolledActs unroll_acts(const plan::Plan& plan, int node);

}  // namespace rill::compiler
