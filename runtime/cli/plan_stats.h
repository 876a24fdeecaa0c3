// `rill plan --stats`: the compile time and the plan's size, how regsts
// change memory zones, the device communicators, and the memory plan of
// each node in the plan (the time it takes to plan and check it, and the
// bytes its slots take).
#pragma once

#include <cstddef>

#include "compiler/plan_generated.h"

namespace rill {

// Prints to stdout; `seconds` the compile's, `bytes` the plan's size.
void print_plan_stats(const plan::Plan& p, size_t bytes, double seconds);

}  // namespace rill
