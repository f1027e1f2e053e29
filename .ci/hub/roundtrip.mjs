// Drives a hub endpoint with the official @huggingface/hub client, for
// http/hub_test.go. Environment:
//   HUB_URL, HUB_TOKEN  the endpoint (the test's emulator) and a token on it
//   SCRATCH_REPO        a repository to create, upload to and download from
//   EXPORT_REPO, EXPORT_REVISION, EXPORT_FILES (comma-separated), OUT_DIR
//                       files the service published, downloaded into OUT_DIR
import { createRepo, uploadFile, downloadFile } from "@huggingface/hub";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";

const hubUrl = process.env.HUB_URL;
const accessToken = process.env.HUB_TOKEN;

async function fetchBytes(repo, revision, path) {
	const blob = await downloadFile({ repo, revision, path, accessToken, hubUrl });
	if (!blob) throw new Error(`${repo.name}@${revision}: ${path} not found`);
	return new Uint8Array(await blob.arrayBuffer());
}

function same(a, b) {
	return a.length === b.length && a.every((x, i) => x === b[i]);
}

// 1. Upload and download with the official client: binary (LFS) and text.
const scratch = { type: "model", name: process.env.SCRATCH_REPO };
await createRepo({ repo: scratch, accessToken, hubUrl, private: true });
const weights = Uint8Array.from({ length: 40000 }, (_, i) => (i * 7) % 251);
await uploadFile({ repo: scratch, accessToken, hubUrl, file: { path: "weights.bin", content: new Blob([weights]) } });
await uploadFile({ repo: scratch, accessToken, hubUrl, file: { path: "notes.txt", content: new Blob(["hello hub\n"]) } });
if (!same(await fetchBytes(scratch, "main", "weights.bin"), weights)) throw new Error("weights.bin came back different");
if (new TextDecoder().decode(await fetchBytes(scratch, "main", "notes.txt")) !== "hello hub\n") throw new Error("notes.txt came back different");
console.log("official client: upload and download ok");

// 2. Read back what the service published.
const exported = { type: "model", name: process.env.EXPORT_REPO };
for (const path of process.env.EXPORT_FILES.split(",")) {
	await writeFile(join(process.env.OUT_DIR, path), await fetchBytes(exported, process.env.EXPORT_REVISION, path));
}
console.log("official client: export downloaded");
