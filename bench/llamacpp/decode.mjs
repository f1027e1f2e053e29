// The llama.cpp peer of the engine's decode benchmark (bench/enginebench
// --llamacpp): llama.cpp's prebuilt CPU build, as the npm package
// node-llama-cpp ships it, decoding a GGUF file that `wts model export
// --format gguf` wrote from the same model folder. Greedy; the prompt's
// prefill and each stream's first token are not timed, so a stream makes
// decode-1 timed tokens. It prints, as JSON, the decode tokens/s of one
// stream and of 16 streams (16 sequences of one context, which llama.cpp
// batches into one pass a step), each the median of its rounds at the
// faster of 1 and all threads (the peer at its best), and its first greedy
// tokens.
//
//	node decode.mjs --model FILE [--prompt 16] [--decode 64] [--rounds 3]
import {readFileSync} from "node:fs";
import os from "node:os";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => a.startsWith("--") ? [...acc, [a.slice(2), all[i + 1]]] : acc, []));
const promptLen = Number(args.prompt ?? 16), decode = Number(args.decode ?? 64), rounds = Number(args.rounds ?? 3);
if (!args.model || decode < 2) throw new Error("usage: node decode.mjs --model FILE [--prompt 16] [--decode 64] [--rounds 3]");

const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: args.model, gpuLayers: 0});
const prompt = Array.from({length: promptLen}, (_, i) => 3 + (i * 7) % 50);

// tokensPerS times `streams` sequences decoding together after one prefill each.
async function tokensPerS(streams, threads) {
	const context = await model.createContext({contextSize: streams * (promptLen + decode + 8), sequences: streams, threads, batchSize: Math.max(512, streams * promptLen), batching: {dispatchSchedule: "nextTick"}});
	try {
		const its = Array.from({length: streams}, () => context.getSequence().evaluate(prompt, {temperature: 0})[Symbol.asyncIterator]());
		await Promise.all(its.map(it => it.next())); // prefill and the first token
		const t0 = performance.now();
		await Promise.all(its.map(async it => {
			for (let k = 1; k < decode; k++) await it.next();
		}));
		const secs = (performance.now() - t0) / 1000;
		await Promise.all(its.map(it => it.return?.()));
		return streams * (decode - 1) / secs;
	} finally {
		await context.dispose();
	}
}

const median = xs => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const version = JSON.parse(readFileSync(new URL("./node_modules/node-llama-cpp/package.json", import.meta.url))).version;
// system_info shows the build's CPU features (AVX2, FMA, F16C): a build
// without them would be a crippled peer.
const out = {engine: `llama.cpp (node-llama-cpp ${version})`, model: args.model, system_info: llama.systemInfo.trim()};
for (const streams of [1, 16]) {
	let best = null;
	for (const threads of [...new Set([1, os.availableParallelism()])]) {
		await tokensPerS(streams, threads); // warm-up
		const rs = [];
		for (let r = 0; r < rounds; r++) rs.push(await tokensPerS(streams, threads));
		const m = median(rs);
		if (!best || m > best.tps) best = {tps: m, threads};
	}
	out[streams === 1 ? "decode_tokens_per_s" : "decode_batch16_tokens_per_s"] = best.tps;
	out[streams === 1 ? "threads" : "batch16_threads"] = best.threads;
}
// greedy_tokens: stream 0's first tokens, which enginebench compares with
// wts's own greedy decoding of the same prompt.
{
	const context = await model.createContext({contextSize: promptLen + 32, threads: 1});
	out.greedy_tokens = [];
	for await (const tok of context.getSequence().evaluate(prompt, {temperature: 0})) {
		out.greedy_tokens.push(tok);
		if (out.greedy_tokens.length >= Math.min(decode, 16)) break;
	}
	await context.dispose();
}
console.log(JSON.stringify(out, null, 2));
await model.dispose();
await llama.dispose();
