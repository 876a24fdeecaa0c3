#include <doctest/doctest.h>

#include "graph/json_lines.h"

namespace rill::graph {

TEST_CASE("JsonLines maps element and field paths to the line they start on") {
  const char* text =
      "// a comment with { and [\n"
      "{\n"
      "  \"name\": \"job\",\n"
      "  ops: [\n"
      "    {\"name\": \"a\", /* } */ \"inputs\": [\"x\"]},\n"
      "    {\n"
      "      \"name\": \"b\\\"q\",\n"
      "      \"attrs\": {\"axis\": 1}\n"
      "    },\n"
      "  ],\n"
      "  \"train\": {\"steps\": 3}\n"
      "}\n";
  JsonLines lines(text);
  CHECK(lines.line_of("name") == 3);
  CHECK(lines.line_of("ops") == 4);
  CHECK(lines.line_of("ops[0]") == 5);
  CHECK(lines.line_of("ops[0].inputs") == 5);
  CHECK(lines.line_of("ops[1]") == 6);
  CHECK(lines.line_of("ops[1].name") == 7);
  CHECK(lines.line_of("ops[1].attrs.axis") == 8);
  CHECK(lines.line_of("ops[1].attrs.keepdims") == 8);  // falls back to attrs
  CHECK(lines.line_of("ops[7]") == 4);                  // falls back to ops
  CHECK(lines.line_of("train.steps") == 11);
  CHECK(lines.line_of("eval.batch_size") == 0);
}

TEST_CASE("JsonLines survives text it cannot follow") {
  for (const char* text : {"", "{", "[[[[", "{\"a\": [1, 2", "\"unterminated", "{a b c}", "}}]]", "/*"}) {
    JsonLines lines(text);
    CHECK(lines.line_of("a") >= 0);
  }
  std::string deep(100000, '[');
  JsonLines lines(deep);
  CHECK(lines.line_of("x") == 0);
}

}  // namespace rill::graph
