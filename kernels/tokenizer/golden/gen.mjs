// Writes testdata/golden.json: the ids Hugging Face's tokenizers.js gives
// each text of testdata/texts.json with a tokenizer.json (the generated
// small preset's; make golden-tokenizer).
//
//   node gen.mjs TOKENIZER_JSON TEXTS_JSON > ../testdata/golden.json
import { readFileSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

const [tokenizerPath, textsPath] = process.argv.slice(2);
const tokenizer = new Tokenizer(JSON.parse(readFileSync(tokenizerPath, "utf8")), {});
const texts = JSON.parse(readFileSync(textsPath, "utf8"));
const out = texts.map((text) => ({ text, ids: Array.from(tokenizer.encode(text, { add_special_tokens: false }).ids) }));
process.stdout.write("[\n" + out.map((o) => JSON.stringify(o)).join(",\n") + "\n]\n");
