#include "runtime/cluster/allowed_roots.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "base/file_access.h"

namespace rill {
namespace {

namespace fs = std::filesystem;

// Absolute, with every link of the part that exists resolved.
fs::path resolved(const std::string& path) {
  std::error_code ec;
  fs::path absolute = fs::absolute(path, ec);
  if (ec) return fs::path(path).lexically_normal();
  fs::path canonical = fs::weakly_canonical(absolute, ec);
  return ec ? absolute.lexically_normal() : canonical;
}

// The roots given, or the defaults. No root given may hold a key file this
// process holds (an error); of the defaults, the working folder is left out
// where it holds one (AllowedRoots::make).
StatusOr<std::vector<std::string>> resolve_roots(const std::vector<std::string>& given,
                                                 const std::vector<std::string>& defaults, const char* flag) {
  std::vector<std::string> out;
  const std::vector<std::string> keys = held_key_paths();
  for (const std::string& root : given.empty() ? defaults : given) {
    std::error_code ec;
    if (!fs::is_directory(root, ec)) {
      if (!given.empty()) return invalid_argument("{} {}: not a folder", flag, root);
      continue;  // a default that this machine lacks
    }
    const std::string path = resolved(root).string();
    const auto key = std::find_if(keys.begin(), keys.end(),
                                  [&](const std::string& k) { return resolved_path_within(k, path); });
    if (key != keys.end() && !given.empty())
      return invalid_argument("{} {} holds the key file {} that this agent uses: a job could read it. Keep key files "
                              "outside the folders jobs may use (~/.config/rill/ is the default key's), or give "
                              "another {}",
                              flag, root, *key, flag);
    out.push_back(path);
  }
  return out;
}

}  // namespace

StatusOr<AllowedRoots> AllowedRoots::make(const std::vector<std::string>& data_roots,
                                          const std::vector<std::string>& checkpoint_roots) {
  std::error_code ec;
  // An agent started in / does not open the whole machine by default.
  std::vector<std::string> data_defaults = {"/usr/share", "/tmp"}, checkpoint_defaults = {"/tmp"};
  // Nor one started in its key's folder: the working folder is left out
  // where it holds a key file this process holds (in /tmp and /usr/share
  // the key itself is refused by its identity, base/file_access.h).
  if (const fs::path here = fs::current_path(ec); !ec && resolved(here.string()) != fs::path("/")) {
    const std::string folder = resolved(here.string()).string();
    std::string key;
    for (const std::string& k : held_key_paths())
      if (resolved_path_within(k, folder)) key = k;
    if (key.empty()) {
      data_defaults.insert(data_defaults.begin(), here.string());
      checkpoint_defaults.insert(checkpoint_defaults.begin(), here.string());
    } else {
      spdlog::warn("the default folder {} (the working folder) is left out of the data and checkpoint roots: it "
                   "holds the key file {} that this agent uses (give --data-root, --checkpoint-root to name folders)",
                   here.string(), key);
    }
  }
  AllowedRoots roots;
  RILL_ASSIGN_OR_RETURN(roots.data, resolve_roots(data_roots, data_defaults, "--data-root"));
  RILL_ASSIGN_OR_RETURN(roots.checkpoint, resolve_roots(checkpoint_roots, checkpoint_defaults, "--checkpoint-root"));
  return roots;
}

bool path_under(const std::string& path, const std::string& root) {
  const fs::path p = resolved(path), r = resolved(root);
  auto pi = p.begin();
  for (auto ri = r.begin(); ri != r.end(); ++ri, ++pi) {
    if (ri->empty()) continue;  // a trailing separator
    if (pi == p.end() || *pi != *ri) return false;
  }
  return true;
}

Status check_job_paths(const graph::Job& job, const std::string& resume, const AllowedRoots& roots,
                       const std::string& where, bool checkpoints) {
  auto check = [&](const std::string& field, const std::string& path,
                   const std::vector<std::string>& allowed, const char* flag) -> Status {
    if (path.empty()) return {};
    for (const std::string& root : allowed)
      if (path_under(path, root)) return {};
    return Status(Code::kPermissionDenied,
                  fmt::format("{}: {} '{}' is outside the folders this agent lets jobs use ({}; set with {})", where,
                              field, path, allowed.empty() ? "none" : fmt::format("{}", fmt::join(allowed, ", ")),
                              flag));
  };
  for (const graph::Dataset& d : job.datasets) {
    RILL_RETURN_IF_ERROR(check(fmt::format("dataset '{}' images", d.name), d.images, roots.data, "--data-root"));
    RILL_RETURN_IF_ERROR(check(fmt::format("dataset '{}' labels", d.name), d.labels, roots.data, "--data-root"));
    RILL_RETURN_IF_ERROR(check(fmt::format("dataset '{}' path", d.name), d.path, roots.data, "--data-root"));
  }
  if (!checkpoints) return {};
  // The master samples text after training, decoding with this vocabulary.
  if (job.generate && job.generate->tokenizer == "gpt2")
    RILL_RETURN_IF_ERROR(check("generate.vocab", job.generate->vocab, roots.data, "--data-root"));
  RILL_RETURN_IF_ERROR(check("checkpoint.dir", job.checkpoint.dir, roots.checkpoint, "--checkpoint-root"));
  if (resume != "latest") RILL_RETURN_IF_ERROR(check("--resume", resume, roots.checkpoint, "--checkpoint-root"));
  return {};
}

}  // namespace rill
