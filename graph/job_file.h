// Job files: a graph::Job written as JSON (format: docs/JOB_FORMAT.md), checked
// against the FlatBuffers schema graph/job.fbs and then by check_job. Every
// error names the file and, where known, the line: "mlp.json:42: ops[3] (fc2):
// input 'h9' is not defined (known: x, w1, h1)". Several errors are reported
// one per line.
//
// Overrides change a loaded job from the command line (`--set train.steps=10`)
// before it is checked, so an override can repair what the file leaves out.
//
// Pure functions of their arguments (load_job_file reads the file); any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "graph/job.h"

namespace rill::graph {

// Parses job-file text: syntax and schema, conversion to a Job, the
// overrides in order, then check_job. `file_name` only labels messages.
StatusOr<Job> parse_job_json(std::string_view text, const std::string& file_name,
                             const std::vector<std::string>& overrides = {});

// Reads `path`, its blocks' includes resolved, and parses it as above.
StatusOr<Job> load_job_file(const std::string& path, const std::vector<std::string>& overrides = {});

// A block of a job file may live in a file of its own: {"include":
// "gpt_block.json", "repeat": 4, ...} takes the included file's fields (a
// JSON object: variables, ops, and any other field of a block) for those
// the entry leaves out, the path relative to the job file's folder. The
// job's text with every include resolved (the text itself when it has
// none), for what sends a job file on (`rill submit`). An included file
// includes nothing itself.
StatusOr<std::string> resolve_includes(const std::string& text, const std::string& job_path);

// OK if `path` holds a good job; for the `rill check JOB` command.
Status check_job_file(const std::string& path);

// The job as job-file text: pretty-printed JSON, always the same for the same
// job, that parse_job_json reads back into an equal Job when `job` is valid. Fails,
// naming the element, on what a job file cannot hold: an attribute that
// graph/job.fbs does not list or of another type than the loader reads, a seed
// above 2^63-1, an SBP other than S(0)..S(9), B or P, text that is not UTF-8.
StatusOr<std::string> job_to_json(const Job& job);

// Applies one "section.field=value" assignment, e.g. "train.steps=100",
// "optimizer.type=adam", "eval.batch_size=1000". On error the job is
// unchanged and the message does not repeat the assignment (callers add it as
// context). The job is not re-checked: call check_job afterwards
// (parse_job_json and load_job_file do).
Status apply_override(Job* job, const std::string& assignment);

// The settings apply_override knows, e.g. "train.steps", in a fixed order.
std::vector<std::string> override_keys();

}  // namespace rill::graph
