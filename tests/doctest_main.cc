// The main of every doctest suite but those with their own (CUDA, net): as
// doctest's, and a run whose filters select no test case fails, so that a
// suite picking its cases by file (the cluster_* suites' --source-file)
// cannot pass by running nothing after a file is renamed. RILL_TEST_DURATIONS=1
// prints each case's time (doctest's --duration) for every suite of a run.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace {

int selected_cases = -1;  // set at the end of a run

// Only to learn how many test cases the filters selected.
struct SelectedCases : doctest::IReporter {
  explicit SelectedCases(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override {
    selected_cases = static_cast<int>(stats.numTestCasesPassingFilters);
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

REGISTER_LISTENER("selected_cases", 1, SelectedCases);

}  // namespace

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  if (const char* durations = std::getenv("RILL_TEST_DURATIONS"); durations && std::string_view(durations) == "1")
    context.setOption("duration", true);
  const int result = context.run();
  if (context.shouldExit() || result != 0) return result;  // --help, --list-test-cases, a failure
  if (selected_cases == 0) {
    std::fprintf(stderr, "no test case matched the filters: a suite that runs nothing fails\n");
    return 1;
  }
  return result;
}
