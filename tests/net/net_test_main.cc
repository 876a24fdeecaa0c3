// The net suites' main: where no test bed can be made (not root, no
// namespaces, no veth or tbf), says why and exits 77, which meson counts as
// skipped rather than passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "tests/net/net_bed.h"

int main(int argc, char** argv) {
  const std::string why = rill::testing::NetBed::unavailable();
  if (!why.empty()) {
    std::printf("skipped: no network test bed here: %s\n", why.c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
