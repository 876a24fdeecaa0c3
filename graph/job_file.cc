#include "graph/job_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <flatbuffers/idl.h>
#include <nlohmann/json.hpp>

#include "graph/check_util.h"
#include "graph/job_check.h"
#include "graph/job_convert.h"
#include "graph/job_schema_text.h"
#include "graph/json_lines.h"
#include "kernels/data/file_bytes.h"

namespace rill::graph {
namespace {

// Job files are small; anything larger is a mistake (a dataset passed as a job).
constexpr size_t kMaxJobFileBytes = 64 << 20;

// Line `line` (1-based) of `text`, trimmed and shortened for quoting.
std::string source_line(std::string_view text, int line) {
  size_t start = 0;
  for (int i = 1; i < line && start != std::string_view::npos; ++i) {
    start = text.find('\n', start);
    if (start != std::string_view::npos) ++start;
  }
  if (start == std::string_view::npos || start >= text.size()) return "";
  size_t end = text.find('\n', start);
  std::string_view s = text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  constexpr size_t kLongest = 100;
  std::string out(s.substr(0, kLongest));
  if (s.size() > kLongest) out += " ...";
  return out;
}

// Parser messages that say more in the job file's terms.
std::string clearer(std::string message) {
  if (message.find("enum values need to be qualified by an enum type") != std::string::npos)
    return "expected a number or a bool here, not a string";
  if (message.find("instead got: end of file") != std::string::npos)
    return "unexpected end of file (" + message + ")";
  return message;
}

// "FILE:LINE: message" from the parser's "FILE:LINE: COLUMN: error: message",
// followed by the offending line of the file.
Status syntax_error(const std::string& parser_error, std::string_view text, const std::string& file_name) {
  static const std::regex kPattern(R"(:(\d+): *\d+: (?:error|warning): ([^\n]*))");
  std::smatch match;
  if (!std::regex_search(parser_error, match, kPattern))
    return invalid_argument("{}: {}", file_name, parser_error);
  int line = 0;
  try {
    line = std::stoi(match[1].str());
  } catch (const std::exception&) {
  }
  std::string detail = clearer(match[2].str());
  // Numbers are range-checked when their table closes, lines later: point
  // at the number itself when it appears once.
  static const std::regex kNumber(R"re(invalid number: "([^"]+)")re");
  std::smatch number;
  if (std::regex_search(detail, number, kNumber)) {
    std::string token = number[1].str();
    size_t at = text.find(token);
    if (at != std::string_view::npos && text.find(token, at + 1) == std::string_view::npos)
      line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + at, '\n'));
  }
  std::string message = fmt::format("{}:{}: {}", file_name, line, detail);
  std::string quoted = source_line(text, line);
  if (!quoted.empty()) message += fmt::format("\n    {}", quoted);
  return Status(Code::kInvalidArgument, message);
}

// An issue about an entry a repeated block made points at where the block
// wrote it, and names the layer.
JobIssue as_written(JobIssue issue, const Origins& origins) {
  const size_t close = issue.path.find(']');
  if (close == std::string::npos) return issue;
  const std::string key = issue.path.substr(0, close + 1);
  const auto it = origins.find(key);
  if (it == origins.end()) return issue;
  issue.path = it->second.path + issue.path.substr(close + 1);
  for (size_t at = issue.message.find(key); at != std::string::npos; at = issue.message.find(key, at + 1))
    if (at == 0 || issue.message[at - 1] != '.') {  // not inside a longer path
      issue.message.replace(at, key.size(), it->second.path);
      break;
    }
  if (!it->second.layer.empty()) issue.message += fmt::format(" (in {})", it->second.layer);
  return issue;
}

// An issue at a field a --set assignment wrote is the assignment's, not
// the file line's.
Status issues_status(const std::vector<JobIssue>& issues, const JsonLines& lines, const std::string& file_name,
                     const Origins& origins = {}, const std::vector<std::string>& overrides = {}) {
  std::string message;
  for (const JobIssue& written : issues) {
    const JobIssue issue = as_written(written, origins);
    if (!message.empty()) message += "\n";
    std::string set;
    for (const std::string& assignment : overrides) {
      const std::string key = assignment.substr(0, assignment.find('='));
      if (issue.path == key || issue.path.rfind(key + ".", 0) == 0 || issue.path.rfind(key + "[", 0) == 0)
        set = assignment;
    }
    int line = lines.line_of(issue.path);
    message += !set.empty() ? fmt::format("{} (--set {}): {}", file_name, set, issue.message)
               : line > 0   ? fmt::format("{}:{}: {}", file_name, line, issue.message)
                            : fmt::format("{}: {}", file_name, issue.message);
  }
  return Status(Code::kInvalidArgument, message);
}

}  // namespace

StatusOr<Job> parse_job_json(std::string_view text, const std::string& file_name,
                             const std::vector<std::string>& overrides) {
  size_t nul = text.find('\0');
  if (nul != std::string_view::npos) {
    int line = 1;
    for (size_t i = 0; i < nul; ++i) line += text[i] == '\n';
    return invalid_argument("{}:{}: the file contains a NUL byte; a job file is text", file_name, line);
  }
  flatbuffers::Parser parser;
  if (!parser.Parse(kJobSchemaText))
    return internal_error("graph/job.fbs does not parse: {}", parser.error_);
  std::string source(text);  // the parser reads a NUL-terminated string
  if (!parser.ParseJson(source.c_str(), file_name.c_str())) return syntax_error(parser.error_, text, file_name);

  Job job;
  check::Issues conversion;
  Origins origins;
  convert_job(*flatbuffers::GetRoot<fb::Job>(parser.builder_.GetBufferPointer()), parser, &job, &conversion,
              &origins);
  JsonLines lines(text);
  if (conversion.size() > 0) return issues_status(conversion.take(), lines, file_name);
  for (const std::string& assignment : overrides)
    RILL_RETURN_IF_ERROR(apply_override(&job, assignment).with_context("--set " + assignment));
  std::vector<JobIssue> issues = find_job_issues(job);
  if (!issues.empty()) return issues_status(issues, lines, file_name, origins, overrides);
  return job;
}

namespace {

StatusOr<std::string> read_job_text(const std::string& path, const std::string& what) {
  auto bytes = read_file_bytes(path);
  if (!bytes.ok()) return bytes.status().with_context("reading " + what);
  if (bytes->size() > kMaxJobFileBytes)
    return invalid_argument("{}: {} bytes is too large for a job file (at most {})", path, bytes->size(),
                            kMaxJobFileBytes);
  return std::string(bytes->begin(), bytes->end());
}

}  // namespace

StatusOr<std::string> resolve_includes(const std::string& text, const std::string& job_path) {
  if (text.find("\"include\"") == std::string::npos) return text;
  nlohmann::ordered_json job = nlohmann::ordered_json::parse(text, nullptr, false, /*ignore_comments=*/true);
  if (!job.is_object() || !job.contains("blocks") || !job["blocks"].is_array()) return text;  // the parser says why
  const std::filesystem::path folder = std::filesystem::path(job_path).parent_path();
  bool any = false;
  for (size_t b = 0; b < job["blocks"].size(); ++b) {
    nlohmann::ordered_json& block = job["blocks"][b];
    if (!block.is_object() || !block.contains("include")) continue;
    if (!block["include"].is_string())
      return invalid_argument("{}: blocks[{}].include must be a path (a string)", job_path, b);
    const std::string path = (folder / block["include"].get<std::string>()).string();
    RILL_ASSIGN_OR_RETURN(std::string included, read_job_text(path, fmt::format("blocks[{}].include", b)));
    nlohmann::ordered_json fields = nlohmann::ordered_json::parse(included, nullptr, false, true);
    if (!fields.is_object())
      return invalid_argument("{} (blocks[{}].include of {}): not a JSON object of a block's fields", path, b,
                              job_path);
    if (fields.contains("include"))
      return invalid_argument("{} (blocks[{}].include of {}): an included block includes nothing itself", path, b,
                              job_path);
    block.erase("include");
    for (auto& [key, value] : fields.items())
      if (!block.contains(key)) block[key] = value;
    any = true;
  }
  return any ? job.dump(2) : text;
}

StatusOr<Job> load_job_file(const std::string& path, const std::vector<std::string>& overrides) {
  RILL_ASSIGN_OR_RETURN(std::string text, read_job_text(path, "the job file"));
  RILL_ASSIGN_OR_RETURN(std::string resolved, resolve_includes(text, path));
  return parse_job_json(resolved, path, overrides);
}

Status check_job_file(const std::string& path) { return load_job_file(path).status(); }

}  // namespace rill::graph
