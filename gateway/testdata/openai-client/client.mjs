// Streams a chat completion and makes a non-streaming call through the gateway with the
// official openai client and no routing headers; prints one JSON line with the results.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "unused", maxRetries: 0 });
const stream = await client.chat.completions.create({
  model: "dummy-model",
  messages: [{ role: "user", content: "Say hello" }],
  stream: true,
  stream_options: { include_usage: true },
});
let text = "";
let chunks = 0;
let usage = null;
for await (const chunk of stream) {
  chunks++;
  text += chunk.choices?.[0]?.delta?.content ?? "";
  if (chunk.usage) usage = chunk.usage;
}
const plain = await client.chat.completions.create({
  model: "dummy-model",
  messages: [{ role: "user", content: "Say hello" }],
});
console.log(JSON.stringify({ chunks, text, usage, plain: plain.choices[0].message.content, plainUsage: plain.usage }));
