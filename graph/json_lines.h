// JsonLines: where each value of a JSON text starts, by path ("ops[3]",
// "ops[3].inputs", "train.batch_size"), so that errors found after parsing
// (by the job checker) can name the file's line. Accepts what the job file
// parser accepts (comments, unquoted keys, trailing commas); on text it cannot
// follow it keeps what it found so far. A value; build once, read from any thread.
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace rill::graph {

class JsonLines {
 public:
  JsonLines() = default;
  explicit JsonLines(std::string_view text);

  // The 1-based line of the value at `path`, or of its closest recorded
  // ancestor ("ops[3].attrs.axis" falls back to "ops[3].attrs", then
  // "ops[3]", then "ops"); 0 when nothing on the path is known.
  int line_of(std::string_view path) const;

 private:
  std::map<std::string, int, std::less<>> lines_;
};

}  // namespace rill::graph
