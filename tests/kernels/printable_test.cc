#include <doctest/doctest.h>

#include <string>

#include "base/printable.h"

namespace rill {
namespace {

TEST_CASE("printable keeps text and UTF-8, escapes control bytes and bytes that are not UTF-8") {
  CHECK(printable("Call me Ishmael.\n\tSome years ago") == "Call me Ishmael.\n\tSome years ago");
  CHECK(printable("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\x8b") == "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\x8b");
  // The terminal's escape sequences, a bell, a carriage return and DEL.
  CHECK(printable("\x1b[2J\x07\r\x7f") == "\\x1b[2J\\x07\\x0d\\x7f");
  CHECK(printable(std::string("a\0b", 3)) == "a\\x00b");
  // Stray continuation bytes, overlong forms, surrogates, cut sequences, past U+10FFFF.
  CHECK(printable("\x80\xbf") == "\\x80\\xbf");
  CHECK(printable("\xc0\xaf") == "\\xc0\\xaf");
  CHECK(printable("\xed\xa0\x80") == "\\xed\\xa0\\x80");
  CHECK(printable("\xe2\x82") == "\\xe2\\x82");
  CHECK(printable("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");
  // A backslash doubled, so an escape is never ambiguous.
  CHECK(printable("\\x41") == "\\\\x41");
}

}  // namespace
}  // namespace rill
