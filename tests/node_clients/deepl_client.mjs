// The official DeepL client for Node.js (deepl-node, pinned in package-lock.json), unchanged, against encdec serve:
// what tests/test_deepl_clients.py asks, from its own calls. Input on stdin (JSON): url, key, wrongKey, quotaKey,
// limitedKey (one request a minute),
// texts (German), glossary (German term -> English term), glossaryTexts. Output on stdout (JSON): what the client
// returned, and the class of each error it raised.
import * as deepl from "deepl-node";

const input = JSON.parse(await new Promise((done) => {
  let data = "";
  process.stdin.on("data", (chunk) => { data += chunk; });
  process.stdin.on("end", () => done(data));
}));

async function failure(call) {
  try {
    await call();
    return null;
  } catch (error) {
    return error.constructor.name;
  }
}

const options = { serverUrl: input.url, maxRetries: 0 };
const client = new deepl.DeepLClient(input.key, options);
const one = await client.translateText(input.texts[0], "de", "en-US");
const many = await client.translateText(input.texts, null, "en-GB");
const glossary = await client.createGlossary("years", "de", "en", new deepl.GlossaryEntries({ entries: input.glossary }));
const listed = (await client.listGlossaries()).map((item) => item.glossaryId);
const entries = (await client.getGlossaryEntries(glossary)).entries();
const withGlossary = await client.translateText(input.glossaryTexts, "de", "en-US", { glossary });
await client.deleteGlossary(glossary);
const multilingual = await client.createMultilingualGlossary("both ways", [ // sent as a form: dictionaries[0].x
  { sourceLangCode: "de", targetLangCode: "en", entries: new deepl.GlossaryEntries({ entries: input.glossary }) },
  { sourceLangCode: "en", targetLangCode: "de", entries: new deepl.GlossaryEntries({ entries: { train: "Bahn" } }) }]);
const pairs = multilingual.dictionaries.map((d) => `${d.sourceLangCode}-${d.targetLangCode}:${d.entryCount}`).sort();
await client.deleteMultilingualGlossary(multilingual);
const usage = await new deepl.DeepLClient(input.quotaKey, options).getUsage();
const overQuota = await failure(() => new deepl.DeepLClient(input.quotaKey, options).translateText("x".repeat(1000), "de", "en-US"));
const wrongKey = await failure(() => new deepl.DeepLClient(input.wrongKey, options).translateText("Hallo", "de", "en-US"));
const gone = await failure(() => client.getGlossary(glossary.glossaryId));
const limited = new deepl.DeepLClient(input.limitedKey, options); // one request a minute
await limited.translateText("Hallo", "de", "en-US");
const overLimit = await failure(() => limited.translateText("Hallo", "de", "en-US"));
process.stdout.write(JSON.stringify({
  one: { text: one.text, detected: one.detectedSourceLang },
  many: many.map((result) => ({ text: result.text, detected: result.detectedSourceLang })),
  glossary: { id: glossary.glossaryId, entryCount: glossary.entryCount, listed, entries, pairs },
  withGlossary: withGlossary.map((result) => result.text),
  usage: { count: usage.character.count, limit: usage.character.limit },
  errors: { overQuota, wrongKey, gone, overLimit },
}));
