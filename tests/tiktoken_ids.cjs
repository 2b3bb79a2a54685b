// tiktoken_ids.cjs — the independent reference for tests/test_gpt2_tokenizer.cpp: prints, as one JSON array, the ids
// that js-tiktoken's "gpt2" encoding gives the UTF-8 text of a file.
//
//   node tests/tiktoken_ids.cjs <npm cache folder> <text file>
//
// js-tiktoken is loaded from <npm cache folder>/node_modules (npm install --prefix <folder> js-tiktoken). The text
// is encoded with encode(text, [], []): no special token is recognised, so "<|endoftext|>" is encoded as ordinary
// text, as GPT2Tokenizer::encode does (js-tiktoken's default, encode(text), would throw on it instead).
"use strict";
const fs = require("fs");
const path = require("path");

if (process.argv.length !== 4) {
  process.stderr.write("usage: node tiktoken_ids.cjs <npm cache folder> <text file>\n");
  process.exit(2);
}
const { getEncoding } = require(path.resolve(process.argv[2], "node_modules", "js-tiktoken"));
const bytes = fs.readFileSync(process.argv[3]);
const text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes);  // invalid UTF-8 refused, a BOM kept
const ids = getEncoding("gpt2").encode(text, [], []);
process.stdout.write(JSON.stringify(ids) + "\n");
