// `rill plan`'s readable views of a plan. The summary (its default
// output): the job's nodes and devices, a step's shape, the tasks by kind,
// the datasets read, each node's planned memory by zone and the device
// communicators. --stats: the compile time and the plan's size, how regsts
// change memory zones, the device communicators, and the memory plan of
// each node in the plan (the time it takes to plan and check it, and the
// bytes its slots take).
#pragma once

#include <cstddef>
#include <string>

#include "compiler/plan_generated.h"

namespace rill {

// The summary as text (lines ending in newlines).
std::string plan_summary(const plan::Plan& p);
// Printed to stdout; `seconds` the compile's, `bytes` the plan's size.
void print_plan_stats(const plan::Plan& p, size_t bytes, double seconds);

}  // namespace rill
