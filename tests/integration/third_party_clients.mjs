// Talks to a running `leoam serve` through two third-party clients, as an application would: the
// Vercel AI SDK (`ai` with `@ai-sdk/openai-compatible`) and LangChain (`@langchain/openai`). Each
// does a chat, a streamed chat with its usage, and a completion; each asks for tools and for JSON
// output, which the server refuses by name. Prints one JSON object on stdout.
// Usage: node third_party_clients.mjs NPM_DIR BASE_URL API_KEY MODEL
import { createRequire } from "node:module";
import path from "node:path";

const [npmDir, baseURL, apiKey, model] = process.argv.slice(2);
const require = createRequire(path.join(npmDir, "package.json"));
const ai = require("ai");
const { createOpenAICompatible } = require("@ai-sdk/openai-compatible");
const { ChatOpenAI, OpenAI } = require("@langchain/openai");
const { z } = require("zod");

const question = "Tell me a story.";
// What a refusal looked like: the HTTP status and the message's mention of the field.
const refusal = (e, field) => {
  const text = `${e?.message ?? ""} ${e?.responseBody ?? ""} ${e?.error?.message ?? ""}`;
  return { status: e?.statusCode ?? e?.status ?? null, names_field: text.includes(field) };
};

const out = { vercel: {}, langchain: {} };

// The Vercel AI SDK.
{
  const provider = createOpenAICompatible({ name: "leoam", baseURL, apiKey, includeUsage: true });
  const chat = await ai.generateText({ model: provider.chatModel(model), prompt: question, maxTokens: 24, temperature: 0 });
  out.vercel.chat = { text: chat.text, usage: chat.usage };
  const stream = ai.streamText({ model: provider.chatModel(model), prompt: question, maxTokens: 24, temperature: 0 });
  let text = "";
  for await (const part of stream.textStream) text += part;
  out.vercel.stream = { text, usage: await stream.usage };
  const completion = await ai.generateText({
    model: provider.completionModel(model), prompt: "Once upon a time", maxTokens: 8, temperature: 0 });
  out.vercel.completion = completion.text;
  try {
    await ai.generateText({
      model: provider.chatModel(model), prompt: question, maxTokens: 8, maxRetries: 0,
      tools: { weather: ai.tool({ description: "the weather", parameters: z.object({ city: z.string() }),
                                   execute: async () => "sunny" }) },
    });
    out.vercel.tools = null;
  } catch (e) {
    out.vercel.tools = refusal(e, "tools");
  }
  try {
    await ai.generateObject({ model: provider.chatModel(model), prompt: question, maxTokens: 8, maxRetries: 0,
                              schema: z.object({ title: z.string() }), mode: "json" });
    out.vercel.json = null;
  } catch (e) {
    out.vercel.json = refusal(e, "response_format");
  }
}

// LangChain.
{
  const chatModel = new ChatOpenAI({ model, apiKey, configuration: { baseURL }, temperature: 0, maxTokens: 24,
                                     maxRetries: 0, streamUsage: true });
  const chat = await chatModel.invoke(question);
  out.langchain.chat = { text: chat.content, usage: chat.usage_metadata };
  let text = "";
  let usage = null;
  for await (const chunk of await chatModel.stream(question)) {
    text += chunk.content;
    if (chunk.usage_metadata) {  // LangChain adds up every chunk's usage: sent once, it is right
      usage = usage === null ? { ...chunk.usage_metadata }
                             : { input_tokens: usage.input_tokens + chunk.usage_metadata.input_tokens,
                                 output_tokens: usage.output_tokens + chunk.usage_metadata.output_tokens,
                                 total_tokens: usage.total_tokens + chunk.usage_metadata.total_tokens };
    }
  }
  out.langchain.stream = { text, usage };
  const llm = new OpenAI({ model, apiKey, configuration: { baseURL }, temperature: 0, maxTokens: 8, maxRetries: 0 });
  out.langchain.completion = await llm.invoke("Once upon a time");
  try {
    await chatModel.bindTools([{ type: "function", function: { name: "weather", description: "the weather",
                                                                parameters: { type: "object", properties: {} } } }])
      .invoke(question);
    out.langchain.tools = null;
  } catch (e) {
    out.langchain.tools = refusal(e, "tools");
  }
  try {
    await chatModel.withStructuredOutput(z.object({ title: z.string() }), { method: "jsonMode" }).invoke(question);
    out.langchain.json = null;
  } catch (e) {
    out.langchain.json = refusal(e, "response_format");
  }
}

console.log(JSON.stringify(out));
