// Writes testdata/golden.json: the ids Hugging Face's tokenizers.js gives
// each text of testdata/texts.json with a byte-level BPE tokenizer.json
// (the generated small preset's; make golden-tokenizer), as it is and with
// the pre-tokenization of Llama 3 and of Qwen 2/3 in its place. Each
// variant records the settings it changed, which the Go and Python tests
// apply to the same file.
//
//   node gen.mjs TOKENIZER_JSON TEXTS_JSON > ../testdata/golden.json
import { readFileSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

const [tokenizerPath, textsPath] = process.argv.slice(2);
const base = JSON.parse(readFileSync(tokenizerPath, "utf8"));
const texts = JSON.parse(readFileSync(textsPath, "utf8"));
const split = (regex) => ({
  type: "Sequence",
  pretokenizers: [
    { type: "Split", pattern: { Regex: regex }, behavior: "Isolated", invert: false },
    { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
  ],
});
const variants = [
  { name: "gpt2", settings: {} },
  {
    name: "llama3",
    settings: {
      pre_tokenizer: split("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"),
      ignore_merges: true,
    },
  },
  {
    name: "qwen2",
    settings: {
      pre_tokenizer: split("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"),
      normalizer: { type: "NFC" },
    },
  },
];
const out = variants.map(({ name, settings }) => {
  const doc = structuredClone(base);
  if (settings.pre_tokenizer) doc.pre_tokenizer = settings.pre_tokenizer;
  if (settings.normalizer) doc.normalizer = settings.normalizer;
  if (settings.ignore_merges) doc.model.ignore_merges = true;
  const tok = new Tokenizer(doc, {});
  const cases = texts.map((text) => ({ text, ids: Array.from(tok.encode(text, { add_special_tokens: false }).ids) }));
  return { name, settings, cases };
});
process.stdout.write("[\n" + out.map((v) => JSON.stringify(v)).join(",\n") + "\n]\n");
