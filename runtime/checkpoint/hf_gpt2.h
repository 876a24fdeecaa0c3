// GPT-2 checkpoints in Hugging Face's layout, into and out of a Rill
// checkpoint of a job with GPT-2's architecture in Rill's names (the GPT
// samples': wte, wpe, h{i}.ln1.g/b, h{i}.attn.{q,k,v,proj}.w/b, h{i}.ln2.g/b,
// h{i}.mlp.{fc,proj}.w/b, lnf.g/b).
//
// Hugging Face's GPT2LMHeadModel keeps `transformer.` before each name (a
// GPT2Model's file does not: both are read), its attention's query, key and
// value as one Conv1D `attn.c_attn` ([C, 3C], stored [in, out] as Rill's
// matmul weights are: columns [0, C) the query's, then the key's, then the
// value's), `mlp.c_fc` and `mlp.c_proj`, and ties `lm_head` to `wte`. The
// buffers `attn.bias` and `attn.masked_bias` are skipped, and so is an
// `lm_head.weight` equal to `wte`. Any other tensor, a missing one, or a
// shape that is not the job's is refused, named.
//
// Vocabulary rows: a job may pad wte (GPT-2's 50,257 to 50,304, as llm.c):
// the rows past the file's are zero on import and left out on export
// (`vocab` rows kept). Positions: a job with a shorter context takes wpe's
// first rows. Only safetensors files are read (a pytorch_model.bin is a
// pickle, which Rill does not load): Hugging Face's model.safetensors.
#pragma once

#include <string>

#include "base/status.h"
#include "graph/job.h"

namespace rill {

struct Gpt2Layout {
  int layers = 0, embd = 0, heads = 0;
  int64_t positions = 0, vocab = 0;  // the job's wpe and wte rows
};

// The job's GPT-2 layout, its variables checked to be exactly GPT-2's in
// Rill's names (an extra or a missing one, or a shape that disagrees,
// named); heads from its attention (the heads of the 4-d reshape of block
// 0's queries, or an op's `heads` attribute).
StatusOr<Gpt2Layout> gpt2_layout(const graph::Job& job);

// Reads `from` (a folder holding model.safetensors and perhaps config.json,
// or a .safetensors file) and writes the job's variables as a checkpoint of
// step 0 under the root `to` (resumed by `rill run --resume`, it trains from
// the imported weights; its optimizer state starts from zero). `out`: a line
// said of what was read and written.
Status import_hf_gpt2(const std::string& from, const graph::Job& job, const std::string& to, std::string* out);

// Reads a Rill checkpoint (a step folder, or a root: its latest) of `job`
// and writes Hugging Face's model.safetensors and config.json into the
// folder `to`, with the first `vocab` rows of wte (0: all).
Status export_hf_gpt2(const std::string& from, const graph::Job& job, const std::string& to, int64_t vocab,
                      std::string* out);

}  // namespace rill
