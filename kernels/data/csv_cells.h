// The cells of a CSV line, as the CSV reader and the peek at a file's head
// (`rill check`) both read them. Pure functions.
#pragma once

#include <string_view>
#include <vector>

namespace rill::csv {

// A cell or line without surrounding blanks (and a cell's quotes).
inline std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) text.remove_suffix(1);
  if (text.size() >= 2 && text.front() == '"' && text.back() == '"') text = text.substr(1, text.size() - 2);
  return text;
}

// Splits `line` at commas into `cells` (reused across lines to save allocations).
inline void split_cells(std::string_view line, std::vector<std::string_view>* cells) {
  cells->clear();
  size_t start = 0;
  while (true) {
    size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      cells->push_back(trim(line.substr(start)));
      return;
    }
    cells->push_back(trim(line.substr(start, comma - start)));
    start = comma + 1;
  }
}

}  // namespace rill::csv
