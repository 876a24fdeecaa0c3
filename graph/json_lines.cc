#include "graph/json_lines.h"

#include <cctype>
#include <string>

namespace rill::graph {
namespace {

// Paths deeper than this are not recorded (job files need about four levels);
// deeper values are skipped without recursion, so no input can exhaust the stack.
constexpr int kMaxDepth = 8;

class Scanner {
 public:
  Scanner(std::string_view text, std::map<std::string, int, std::less<>>* lines)
      : text_(text), lines_(lines) {}

  void run() {
    skip_space();
    value("", 0);
  }

 private:
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  void advance() {
    if (at_end()) return;
    if (text_[pos_] == '\n') ++line_;
    ++pos_;
  }

  void skip_space() {
    while (!at_end()) {
      char c = peek();
      if (c == '/' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '/') {
        while (!at_end() && peek() != '\n') advance();
      } else if (c == '/' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '*') {
        advance();
        advance();
        while (!at_end() && !(peek() == '*' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '/')) advance();
        advance();
        advance();
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        advance();
      } else {
        return;
      }
    }
  }

  // A quoted string (returned unescaped only as far as keys need) or a bare word.
  std::string token() {
    std::string out;
    char quote = peek();
    if (quote == '"' || quote == '\'') {
      advance();
      while (!at_end() && peek() != quote) {
        if (peek() == '\\') advance();
        out.push_back(peek());
        advance();
      }
      advance();
      return out;
    }
    while (!at_end()) {
      char c = peek();
      if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '+' || c == '.') {
        out.push_back(c);
        advance();
      } else {
        break;
      }
    }
    return out;
  }

  // Skips one value of any depth without recursing.
  void skip_value() {
    int depth = 0;
    do {
      skip_space();
      char c = peek();
      if (at_end()) return;
      if (c == '{' || c == '[') {
        ++depth;
        advance();
      } else if (c == '}' || c == ']') {
        --depth;
        advance();
      } else if (c == '"' || c == '\'') {
        token();
      } else {
        size_t before = pos_;
        token();
        if (pos_ == before) advance();  // ',' ':' or a stray byte
      }
    } while (depth > 0);
  }

  void value(const std::string& path, int depth) {
    skip_space();
    if (at_end()) return;
    if (!path.empty()) lines_->emplace(path, line_);
    if (depth >= kMaxDepth) {
      skip_value();
      return;
    }
    char c = peek();
    if (c == '{') {
      advance();
      while (true) {
        skip_space();
        if (at_end()) return;
        if (peek() == '}') {
          advance();
          return;
        }
        size_t before = pos_;
        std::string key = token();
        skip_space();
        if (peek() != ':' || pos_ == before) return;  // not something we can follow
        advance();
        value(path.empty() ? key : path + "." + key, depth + 1);
        skip_space();
        if (peek() == ',') advance();
      }
    } else if (c == '[') {
      advance();
      for (int index = 0;; ++index) {
        skip_space();
        if (at_end()) return;
        if (peek() == ']') {
          advance();
          return;
        }
        size_t before = pos_;
        value(path + "[" + std::to_string(index) + "]", depth + 1);
        skip_space();
        if (peek() == ',') advance();
        if (pos_ == before) return;
      }
    } else {
      size_t before = pos_;
      token();
      if (pos_ == before) advance();
    }
  }

  std::string_view text_;
  std::map<std::string, int, std::less<>>* lines_;
  size_t pos_ = 0;
  int line_ = 1;
};

}  // namespace

JsonLines::JsonLines(std::string_view text) { Scanner(text, &lines_).run(); }

int JsonLines::line_of(std::string_view path) const {
  std::string current(path);
  while (!current.empty()) {
    auto it = lines_.find(current);
    if (it != lines_.end()) return it->second;
    size_t cut = current.back() == ']' ? current.rfind('[') : current.find_last_of(".[");
    if (cut == std::string::npos) return 0;
    current.resize(cut);
  }
  return 0;
}

}  // namespace rill::graph
