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

TEST_CASE("printable_name escapes newlines and tabs too, and shows at most its limit of a long name") {
  CHECK(printable_name("node-1.0123456789abcdef") == "node-1.0123456789abcdef");
  // ZeroMQ's own routing ids begin with a zero byte.
  CHECK(printable_name(std::string("\0k\x8b" "Eg", 5)) == "\\x00k\\x8bEg");
  // A name that would start a log line of its own, or retitle the window.
  CHECK(printable_name("a\nrill: forged\tline") == "a\\x0arill: forged\\x09line");
  CHECK(printable_name("\x1b]0;title\x07") == "\\x1b]0;title\\x07");
  CHECK(printable_name(std::string(255, 'A')) == std::string(64, 'A') + "... (255 bytes)");
  CHECK(printable_name(std::string(10, 'A'), 4) == "AAAA... (10 bytes)");
}

}  // namespace
}  // namespace rill
