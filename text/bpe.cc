#include "text/bpe.h"

#include "base/printable.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace rill::text {

namespace {

// GPT-2's pattern, with JavaScript's \s spelled out (PCRE2's differs).
constexpr const char* kSpace =
    "\\t\\n\\x{0B}\\f\\r \\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}";

std::string gpt2_pattern() {
  const std::string s = kSpace;
  return "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" + s + "\\p{L}\\p{N}]+|[" + s + "]+(?![^" + s + "])|[" +
         s + "]+";
}

// The length of the valid UTF-8 sequence at `p` (RFC 3629: no overlong
// forms, no surrogates, nothing past U+10FFFF), or 0.
size_t utf8_length(const unsigned char* p, size_t left) {
  const unsigned char c = p[0];
  if (c < 0x80) return 1;
  size_t n;
  uint32_t min;
  if ((c & 0xE0) == 0xC0) n = 2, min = 0x80;
  else if ((c & 0xF0) == 0xE0) n = 3, min = 0x800;
  else if ((c & 0xF8) == 0xF0) n = 4, min = 0x10000;
  else return 0;
  if (left < n) return 0;
  uint32_t cp = c & (0x7F >> n);
  for (size_t i = 1; i < n; ++i) {
    if ((p[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

// bytes_to_unicode's code point for `byte`.
uint32_t symbol_code(uint8_t byte) {
  auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
  if (printable(byte)) return byte;
  uint32_t n = 0;
  for (int b = 0; b < byte; ++b)
    if (!printable(b)) ++n;
  return 256 + n;
}

std::string utf8_of(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

// A vocabulary file, opened and checked as a job's data is (an agent reads
// only under its data roots, never a key file; base/file_access.h).
StatusOr<std::string> read_file(const std::string& path, const FileAccess& access) {
  // GPT-2's two files take 1.5 MB; a bound well above, so that parsing a
  // file a job names cannot take the master's memory.
  constexpr off_t kLimit = off_t{8} << 20;
  struct stat st;
  RILL_ASSIGN_OR_RETURN(const int fd, open_checked(path, access, "vocabulary file", /*fifos=*/false, &st));
  std::string out;
  Status failed;
  if (st.st_size > kLimit) {
    failed = invalid_argument("'{}' has {} bytes; a vocabulary file has at most {}", path, st.st_size, kLimit);
  } else {
    out.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        failed = Status(Code::kUnavailable, fmt::format("cannot read '{}': {}", path,
                                                        n < 0 ? std::strerror(errno) : "it ended early"));
        break;
      }
      done += static_cast<size_t>(n);
    }
  }
  ::close(fd);
  if (!failed.ok()) return failed;
  return out;
}

}  // namespace

std::string byte_symbol(uint8_t byte) { return utf8_of(symbol_code(byte)); }

struct BpeTokenizer::Pattern {
  pcre2_code* code = nullptr;
  ~Pattern() {
    if (code) pcre2_code_free(code);
  }
};

BpeTokenizer::BpeTokenizer() = default;
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;
BpeTokenizer::~BpeTokenizer() = default;

StatusOr<BpeTokenizer> BpeTokenizer::load(const std::string& dir, const FileAccess& access) {
  RILL_ASSIGN_OR_RETURN(std::string encoder, read_file(dir + "/encoder.json", access));
  RILL_ASSIGN_OR_RETURN(std::string merges, read_file(dir + "/vocab.bpe", access));
  return parse(encoder, merges, dir);
}

StatusOr<BpeTokenizer> BpeTokenizer::parse(std::string_view encoder_json, std::string_view merges,
                                           const std::string& where) {
  BpeTokenizer t;
  // Symbols back to bytes: each symbol is one code point below U+0200.
  std::unordered_map<uint32_t, uint8_t> byte_of_code;
  for (int b = 0; b < 256; ++b) byte_of_code[symbol_code(static_cast<uint8_t>(b))] = static_cast<uint8_t>(b);
  auto bytes_of = [&](std::string_view symbols, std::string* out) {
    out->clear();
    const auto* p = reinterpret_cast<const unsigned char*>(symbols.data());
    for (size_t i = 0; i < symbols.size();) {
      const size_t n = utf8_length(p + i, symbols.size() - i);
      if (n == 0) return false;
      uint32_t cp = n == 1 ? p[i] : (p[i] & (0x7F >> n));
      for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (p[i + k] & 0x3F);
      auto it = byte_of_code.find(cp);
      if (it == byte_of_code.end()) return false;
      out->push_back(static_cast<char>(it->second));
      i += n;
    }
    return true;
  };
  nlohmann::json vocab = nlohmann::json::parse(encoder_json.begin(), encoder_json.end(), nullptr, false);
  if (!vocab.is_object())
    return invalid_argument("{}/encoder.json: not a JSON object of symbols to ids", where);
  // Ids are 0 to N - 1 for N entries, each once.
  const int64_t entries = static_cast<int64_t>(vocab.size());
  t.bytes_of_id_.resize(static_cast<size_t>(entries));
  std::vector<bool> seen(static_cast<size_t>(entries), false);
  std::string bytes;
  for (const auto& [symbols, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= entries)
      return invalid_argument("{}/encoder.json: the id of {} is not an integer in range: the ids of its {} entries are 0 "
                              "to {}",
                              where, excerpt(symbols), entries, entries - 1);
    const auto i = static_cast<size_t>(id.get<int64_t>());
    if (seen[i]) return invalid_argument("{}/encoder.json: id {} is given twice ({} is one)", where, i, excerpt(symbols));
    seen[i] = true;
    if (!bytes_of(symbols, &bytes))
      return invalid_argument("{}/encoder.json: {} is not spelled in GPT-2's byte symbols", where, excerpt(symbols));
    t.bytes_of_id_[i] = bytes;
    if (!t.id_of_bytes_.emplace(bytes, static_cast<int32_t>(i)).second)
      return invalid_argument("{}/encoder.json: {} spells the bytes of another entry", where, excerpt(symbols));
  }
  for (int b = 0; b < 256; ++b) {
    auto it = t.id_of_bytes_.find(std::string(1, static_cast<char>(b)));
    if (it == t.id_of_bytes_.end())
      return invalid_argument("{}/encoder.json: byte {} has no entry of its own", where, b);
    t.byte_id_[b] = it->second;
  }
  // vocab.bpe: "#version ..." then "a b" per line; blank lines are skipped.
  int32_t rank = 0;
  size_t line_no = 0;
  std::string left, right;
  for (size_t at = 0; at < merges.size(); ++line_no) {
    size_t end = merges.find('\n', at);
    if (end == std::string_view::npos) end = merges.size();
    std::string_view line = merges.substr(at, end - at);
    at = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 0 && line.front() == '#')) continue;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos)
      return invalid_argument("{}/vocab.bpe line {}: expected two symbols and one space, got {}", where,
                              line_no + 1, excerpt(line));
    if (!bytes_of(line.substr(0, space), &left) || !bytes_of(line.substr(space + 1), &right))
      return invalid_argument("{}/vocab.bpe line {}: {} is not spelled in GPT-2's byte symbols", where, line_no + 1,
                              excerpt(line));
    auto a = t.id_of_bytes_.find(left), b = t.id_of_bytes_.find(right), ab = t.id_of_bytes_.find(left + right);
    if (a == t.id_of_bytes_.end() || b == t.id_of_bytes_.end() || ab == t.id_of_bytes_.end())
      return invalid_argument("{}/vocab.bpe line {}: {} merges or makes a symbol encoder.json does not have", where,
                              line_no + 1, excerpt(line));
    const uint64_t key = (static_cast<uint64_t>(a->second) << 32) | static_cast<uint32_t>(b->second);
    t.merges_.emplace(key, Merge{rank++, ab->second});  // a repeated merge keeps its first rank
  }
  const std::string pattern = gpt2_pattern();
  int error = 0;
  PCRE2_SIZE offset = 0;
  t.pattern_.reset(new Pattern);
  t.pattern_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(), PCRE2_UTF, &error,
                                   &offset, nullptr);
  if (t.pattern_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    return Status(Code::kInternal, fmt::format("GPT-2's pattern does not compile at {}: {}", offset,
                                               reinterpret_cast<const char*>(message)));
  }
  (void)pcre2_jit_compile(t.pattern_->code, PCRE2_JIT_COMPLETE);  // the interpreter where JIT is not there
  return t;
}

int32_t BpeTokenizer::id_of(std::string_view bytes) const {
  auto it = id_of_bytes_.find(std::string(bytes));
  return it == id_of_bytes_.end() ? -1 : it->second;
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>* out,
                                std::vector<int32_t>* word) const {
  word->clear();
  for (char c : piece) word->push_back(byte_id_[static_cast<uint8_t>(c)]);
  while (word->size() > 1) {
    // The adjacent pair earliest in the merge list...
    int32_t best = INT32_MAX, first = -1, second = -1, made = -1;
    for (size_t i = 0; i + 1 < word->size(); ++i) {
      auto it = merges_.find((static_cast<uint64_t>((*word)[i]) << 32) | static_cast<uint32_t>((*word)[i + 1]));
      if (it != merges_.end() && it->second.rank < best)
        best = it->second.rank, first = (*word)[i], second = (*word)[i + 1], made = it->second.id;
    }
    if (made < 0) break;
    // ...joined wherever it occurs, left to right.
    size_t kept = 0;
    for (size_t i = 0; i < word->size();) {
      if (i + 1 < word->size() && (*word)[i] == first && (*word)[i + 1] == second) {
        (*word)[kept++] = made;
        i += 2;
      } else {
        (*word)[kept++] = (*word)[i++];
      }
    }
    word->resize(kept);
  }
  out->insert(out->end(), word->begin(), word->end());
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out, word;
  std::unordered_map<std::string, std::vector<int32_t>> cache;  // pieces repeat: words
  auto piece = [&](std::string_view p) {
    auto it = cache.find(std::string(p));
    if (it == cache.end()) {
      std::vector<int32_t> ids;
      encode_piece(p, &ids, &word);
      it = cache.emplace(std::string(p), std::move(ids)).first;
    }
    out.insert(out.end(), it->second.begin(), it->second.end());
  };
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(pattern_->code, nullptr);
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  // Runs of valid UTF-8 go through the pattern; a byte that is not UTF-8 is
  // a piece of its own.
  for (size_t at = 0; at < text.size();) {
    size_t end = at;
    while (end < text.size()) {
      const size_t n = utf8_length(bytes + end, text.size() - end);
      if (n == 0) break;
      end += n;
    }
    for (PCRE2_SIZE from = at; from < end;) {
      const int found = pcre2_match(pattern_->code, bytes, end, from, PCRE2_NO_UTF_CHECK, match, nullptr);
      const PCRE2_SIZE* span = pcre2_get_ovector_pointer(match);
      if (found < 0 || span[0] != from || span[1] <= from) {
        // The pattern takes every character (its last branch any run of
        // space, the one before any other): not reached.
        const size_t n = utf8_length(bytes + from, end - from);
        piece(text.substr(from, n));
        from += n;
        continue;
      }
      piece(text.substr(from, span[1] - from));
      from = span[1];
    }
    if (end < text.size()) piece(text.substr(end, 1));
    at = end + (end < text.size() ? 1 : 0);
  }
  pcre2_match_data_free(match);
  return out;
}

StatusOr<std::string> BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size())
      return invalid_argument("token {} at position {} is outside the vocabulary [0, {})", ids[i], i, vocab_size());
    out += bytes_of_id_[static_cast<size_t>(ids[i])];
  }
  return out;
}

}  // namespace rill::text
